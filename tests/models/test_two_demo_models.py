"""The shipped demo model's two revisions (bf16 and awq) served as two models at once, in
process: the API's ``model``, the ``done`` event's model, /v1/models, per-model health,
a conversation that stays on its model, and LRU unloading of real engines under a
weights budget that holds one of them."""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from qwen_ui.demo import scenes
from qwen_ui.demo.install import weights_dir
from qwen_ui.models.memory import checkpoint_bytes
from qwen_ui.server import create_app
from qwen_ui.services import services_of
from qwen_ui.settings import DEMO_MODEL_ID, Settings
from qwen_ui.store import ModelStore
from tests.support.auth import log_in

BF16, AWQ = f"{DEMO_MODEL_ID}@bf16", f"{DEMO_MODEL_ID}@awq"
pytestmark = pytest.mark.slow


def scene_png() -> bytes:
    sample = next(s for s in scenes.held_out(20, seed=1) if len(s.scenes) == 1)
    out = io.BytesIO()
    sample.images()[0].save(out, "PNG")
    return out.getvalue()


def served(home: Path, **values: Any) -> Iterator[TestClient]:
    settings = Settings(home=home, device="cpu", models=f"{BF16},{AWQ}", **values)
    with TestClient(create_app(settings, ui=False)) as client:
        log_in(client)
        yield client


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    yield from served(tmp_path / "home", max_new_tokens=8)


def ask(client: TestClient, model: str | None = None, conversation: str = "") -> Any:
    data = {"question": "How many shapes are there?", "lang": "en"}
    if model is not None:
        data["model"] = model
    if conversation:
        data["conversation_id"] = conversation
    files = [] if conversation else [("images", ("a.png", scene_png(), "image/png"))]
    return client.post("/api/v1/ask", data=data, files=files or None)


def done_of(response: Any) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    lines = [json.loads(line) for line in response.text.splitlines() if line]
    assert lines[-1]["type"] == "done", lines[-1]
    return dict(lines[-1])


def states(client: TestClient) -> dict[str, str]:
    body = client.get("/healthz").json()
    return {row["model"]: row["state"] for row in body["models"]}


def test_two_revisions_answer_by_name_and_report_their_state(client: TestClient) -> None:
    assert states(client) == {BF16: "not_loaded", AWQ: "not_loaded"}
    listed = client.get("/v1/models").json()
    assert [m["id"] for m in listed["data"]] == [BF16, AWQ]
    default = ask(client)
    assert default.headers["x-qwen-ui-model"] == BF16 and done_of(default)["model"] == BF16
    assert states(client) == {BF16: "ready", AWQ: "not_loaded"}
    awq = ask(client, AWQ)
    assert awq.headers["x-qwen-ui-model"] == AWQ and done_of(awq)["model"] == AWQ
    assert states(client) == {BF16: "ready", AWQ: "ready"}
    body = client.get("/healthz").json()
    assert (body["model"], body["revision"]) == (DEMO_MODEL_ID, "bf16")  # the default
    metrics = client.get("/metrics").text
    assert f'qwen_ui_model_state{{model="{AWQ}",state="ready"}} 1.0' in metrics
    assert f'qwen_ui_model_requests_in_flight{{model="{BF16}"}} 0.0' in metrics


def test_an_unknown_model_is_a_typed_404_in_both_languages(client: TestClient) -> None:
    response = ask(client, "qwen-ui/nope@bf16")
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "model_not_found" and BF16 in error["message"]
    client.headers["accept-language"] = "zh-CN"
    response = ask(client, "qwen-ui/nope@bf16")
    assert "此处不提供模型" in response.json()["error"]["message"]
    assert states(client) == {BF16: "not_loaded", AWQ: "not_loaded"}  # nothing loaded


def test_a_follow_up_goes_to_the_model_its_conversation_started_on(client: TestClient) -> None:
    first = done_of(ask(client, AWQ))
    follow_up = ask(client, conversation=first["conversation_id"])
    assert follow_up.headers["x-qwen-ui-model"] == AWQ and done_of(follow_up)["model"] == AWQ
    picked = ask(client, BF16, conversation=first["conversation_id"])
    assert done_of(picked)["model"] == BF16


def test_openai_chat_completions_answer_from_the_named_model(client: TestClient) -> None:
    import base64

    url = "data:image/png;base64," + base64.b64encode(scene_png()).decode()
    body = {
        "model": AWQ,
        "max_tokens": 8,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": url}},
                    {"type": "text", "text": "How many shapes are there?"},
                ],
            }
        ],
    }
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["model"] == AWQ
    assert states(client)[AWQ] == "ready" and states(client)[BF16] == "not_loaded"
    unknown = client.post("/v1/chat/completions", json={**body, "model": "x/y@z"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"


def test_only_one_fits_the_least_recently_used_idle_one_is_unloaded(tmp_path: Path) -> None:
    largest = max(checkpoint_bytes(weights_dir(r)) for r in ("bf16", "awq"))
    limit = largest + largest // 2  # one revision fits, not both
    for client in served(tmp_path / "home", max_new_tokens=4, model_memory_bytes=limit):
        assert done_of(ask(client))["model"] == BF16
        assert done_of(ask(client, AWQ))["model"] == AWQ
        assert states(client) == {BF16: "not_loaded", AWQ: "ready"}
        assert done_of(ask(client, BF16))["model"] == BF16
        assert states(client) == {BF16: "ready", AWQ: "not_loaded"}


def test_a_ref_moved_by_models_install_is_served_after_a_reload(tmp_path: Path) -> None:
    """``qwen-ui models install`` points bf16 at new files; the next question after
    ``POST /admin/models/reload`` is answered from them by a new engine."""
    changed = tmp_path / "bf16-v2"
    shutil.copytree(weights_dir("bf16"), changed)
    facts = json.loads((changed / "qwen_ui.json").read_text())
    (changed / "qwen_ui.json").write_text(json.dumps({**facts, "scope": {"en": "v2", "zh": "v2"}}))
    token = "reload-token-91c2"
    for client in served(tmp_path / "home", max_new_tokens=4, admin_token=token):
        assert done_of(ask(client))["model"] == BF16
        services = services_of(client.app)
        first = services.models.entries[BF16].current
        assert first is not None and first.snapshot_id is not None
        new = ModelStore(services.settings.model_path).install(changed, DEMO_MODEL_ID, "bf16")
        headers = {"Authorization": f"Bearer {token}"}
        response = client.post("/admin/models/reload", headers=headers)
        assert response.status_code == 200 and response.json()["moved"] == [BF16]
        assert done_of(ask(client))["model"] == BF16
        second = services.models.entries[BF16].current
        assert second is not None and second is not first and second.snapshot_id == new.id
        assert first.closed
