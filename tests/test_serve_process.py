"""One real server process: /healthz within 2 s of process start, then the page."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from qwen_ui.settings import DEMO_MODEL_ID
from qwen_ui.store import ModelStore
from qwen_ui.web.ui import PAGE_TITLE
from tests.support.server import ServerProcess, log_in_with_form

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("home"))
    yield process
    process.stop()


def test_healthz_within_two_seconds_of_process_start(server: ServerProcess) -> None:
    seconds = server.wait_for("/healthz")
    assert seconds < 2.0, f"/healthz took {seconds:.2f} s"
    body = httpx.get(server.url + "/healthz").json()
    assert body["status"] == "ok" and body["engine"] in ("idle", "loading", "ready")


def test_gradio_page_after_login(server: ServerProcess) -> None:
    server.wait_for("/login")
    with httpx.Client(base_url=server.url, follow_redirects=False) as client:
        anonymous = client.get("/", headers={"Accept": "text/html"})
        assert anonymous.status_code in (302, 303, 307)
        assert "/login" in anonymous.headers["location"]
        log_in_with_form(client, "demo", "demo", server.demo_password())
        page = client.get("/")
        assert page.status_code == 200
        config = client.get("/config").json()
        assert config["title"] == PAGE_TITLE


def test_first_run_installs_the_demo_model(server: ServerProcess) -> None:
    """The embedded default answers without any download: the shipped demo is in the store
    once the app is up (it is installed while /healthz already answers)."""
    server.wait_for("/login")
    store = ModelStore(server.home / "models")
    for revision in ("bf16", "awq"):
        assert store.is_installed(DEMO_MODEL_ID, revision), revision
        store.verify(DEMO_MODEL_ID, revision, full=True)


def test_password_printed_once_and_never_logged_again(server: ServerProcess) -> None:
    password = server.demo_password()
    assert server.output().count(password) == 1
