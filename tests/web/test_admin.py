"""The admin routes: the admin token as a Bearer token (none, wrong, unset: 401, nothing
logged at any level), activating a model and reloading from the settings file."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from qwen_ui.server import create_app
from qwen_ui.settings import DEMO_MODEL_ID, Settings

TOKEN = "admin-token-7f3c9e1b5d2a"
BF16, AWQ = f"{DEMO_MODEL_ID}@bf16", f"{DEMO_MODEL_ID}@awq"


def served(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings, ui=False)) as client:
        yield client


@pytest.fixture
def client(home: Path) -> Iterator[TestClient]:
    settings = Settings(home=home, device="cpu", admin_token=TOKEN, models=BF16)  # type: ignore[arg-type]
    yield from served(settings)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize(
    "headers",
    [{}, bearer("wrong"), bearer(TOKEN + "x"), {"Authorization": TOKEN}, bearer("")],
    ids=["none", "wrong", "longer", "no-scheme", "empty"],
)
def test_without_the_token_every_admin_route_is_401_and_nothing_is_logged(
    client: TestClient, headers: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    for method, path in (
        ("GET", "/admin/models"),
        ("POST", "/admin/models/activate"),
        ("POST", "/admin/models/reload"),
    ):
        body = {"model": AWQ} if path.endswith("activate") else None
        response = client.request(method, path, headers=headers, json=body)
        assert response.status_code == 401, (path, response.text)
        assert response.json()["error"]["code"] == "admin_unauthorized"
    assert client.get("/healthz").json()["model"] == DEMO_MODEL_ID
    assert [m["model"] for m in client.get("/healthz").json()["models"]] == [BF16]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert TOKEN not in logged and "wrong" not in logged


def test_unset_token_refuses_even_an_empty_bearer(home: Path) -> None:
    for client in served(Settings(home=home, device="cpu")):
        assert client.get("/admin/models", headers=bearer("")).status_code == 401
        assert client.get("/admin/models").status_code == 401


def test_activate_and_list_with_the_token(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    response = client.post("/admin/models/activate", headers=bearer(TOKEN), json={"model": AWQ})
    assert response.status_code == 200, response.text
    assert response.json() == {"default": AWQ, "models": [AWQ], "retired": [BF16], "moved": []}
    listed = client.get("/admin/models", headers=bearer(TOKEN)).json()
    assert listed["default"] == AWQ and [m["model"] for m in listed["models"]] == [AWQ]
    assert client.get("/healthz").json()["revision"] == "awq"
    bad = client.post("/admin/models/activate", headers=bearer(TOKEN), json={"model": "x"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "switch_refused"
    missing = client.post(
        "/admin/models/activate", headers=bearer(TOKEN), json={"model": "acme/none@v1"}
    )
    assert missing.status_code == 503 and missing.json()["error"]["code"] == "model_not_installed"
    assert TOKEN not in "\n".join(r.getMessage() for r in caplog.records)


def test_reload_reads_the_settings_files_model_list(home: Path) -> None:
    file = home / "qwen-ui.env"
    file.write_text(f"QWEN_UI_MODELS={BF16}\n")
    settings = Settings(home=home, device="cpu", admin_token=TOKEN, settings_file=file)  # type: ignore[arg-type]
    for client in served(settings):
        file.write_text(f"# switched\nQWEN_UI_MODELS={AWQ}, {BF16}\nQWEN_UI_PORT=1\n")
        response = client.post("/admin/models/reload", headers=bearer(TOKEN))
        assert response.status_code == 200, response.text
        assert response.json()["models"] == [AWQ, BF16]
        file.write_text(f"QWEN_UI_MODEL_ID={DEMO_MODEL_ID}\nQWEN_UI_MODEL_REVISION=bf16\n")
        assert client.post("/admin/models/reload", headers=bearer(TOKEN)).json()["models"] == [BF16]
        file.write_text("QWEN_UI_MODELS=not-a-ref\n")
        refused = client.post("/admin/models/reload", headers=bearer(TOKEN))
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "switch_refused"
        assert client.get("/admin/models", headers=bearer(TOKEN)).json()["default"] == BF16
