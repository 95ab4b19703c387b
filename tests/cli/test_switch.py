"""``qwen-ui models activate|reload|served`` against a server: token from the environment,
exit codes, and the server's message on refusal."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from qwen_ui.cli import main
from qwen_ui.server import create_app
from qwen_ui.settings import DEMO_MODEL_ID, Settings
from tests.conftest import free_port

TOKEN = "cli-admin-token-5e0a"
BF16, AWQ = f"{DEMO_MODEL_ID}@bf16", f"{DEMO_MODEL_ID}@awq"


@pytest.fixture
def url(home: Path) -> Iterator[str]:
    settings = Settings(home=home, device="cpu", admin_token=TOKEN, models=BF16)  # type: ignore[arg-type]
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings, ui=False), port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        thread.join(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(30)


def test_activate_served_and_refusals(
    url: str, home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("QWEN_UI_HOME", str(home))
    monkeypatch.delenv("QWEN_UI_ADMIN_TOKEN", raising=False)
    assert main(["models", "activate", AWQ, "--url", url]) == 2  # no token here
    assert "QWEN_UI_ADMIN_TOKEN" in capsys.readouterr().err
    monkeypatch.setenv("QWEN_UI_ADMIN_TOKEN", "wrong")
    assert main(["models", "activate", AWQ, "--url", url]) == 1
    assert "admin token" in capsys.readouterr().err
    monkeypatch.setenv("QWEN_UI_ADMIN_TOKEN", TOKEN)
    assert main(["models", "activate", AWQ, "--url", url]) == 0
    out = capsys.readouterr().out
    assert f"default: {AWQ}" in out and f"retired (finishing their requests): {BF16}" in out
    assert main(["models", "activate", "acme/none@v1", "--url", url]) == 1
    assert "not installed" in capsys.readouterr().err
    assert main(["models", "served", "--url", url]) == 0
    assert f'"default": "{AWQ}"' in capsys.readouterr().out
    assert main(["models", "reload", "--url", url]) == 0
    assert main(["models", "served", "--url", "http://127.0.0.1:9"]) == 2  # nothing there
