"""POST /api/v1/ask over the in-process app, with the tiny random model in the store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from qwen_ui.server import create_app
from qwen_ui.services import services_of
from qwen_ui.store import ModelStore
from tests.engine.conftest import TINY_ID, png, tiny_settings
from tests.engine.support import build_tiny_model, force_answer
from tests.support.auth import log_in


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "bf16")


@pytest.fixture
def api_client(tmp_path: Path, tiny_model: Path) -> Iterator[TestClient]:
    settings = tiny_settings(tmp_path / "home", max_images=3)
    ModelStore(settings.model_path).install(tiny_model, TINY_ID, "bf16")
    with TestClient(create_app(settings)) as client:
        log_in(client)
        yield client


def lines(response: object) -> list[dict[str, object]]:
    text = response.text  # type: ignore[attr-defined]
    return [json.loads(line) for line in text.splitlines() if line]


def post(client: TestClient, question: str, images: list[bytes], **form: str):  # type: ignore[no-untyped-def]
    files = [("images", (f"{i}.png", data, "image/png")) for i, data in enumerate(images)]
    return client.post("/api/v1/ask", data={"question": question, **form}, files=files or None)


def test_ask_streams_ndjson_events(api_client: TestClient) -> None:
    response = post(api_client, "What shape?", [png(), png((40, 70), (0, 0, 255))])
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/x-ndjson")
    events = lines(response)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "stage" and kinds[-1] == "done"
    assert "token" in kinds
    staged = [(e["stage"], e["index"]) for e in events if e["type"] == "stage"]
    assert staged[:2] == [("decoding", 1), ("decoding", 2)]
    assert ("answering", 0) in staged
    done = events[-1]
    answer = "".join(str(e["text"]) for e in events if e["type"] == "token")
    assert done["answer"] == answer and done["images"] == 2
    # a follow-up in the same conversation, with no new image
    follow = lines(post(api_client, "And now?", [], conversation_id=str(done["conversation_id"])))
    assert follow[-1]["type"] == "done"
    assert follow[-1]["conversation_id"] == done["conversation_id"]
    metrics = api_client.get("/metrics").text
    assert "qwen_ui_engine_time_to_first_token_seconds_count 2.0" in metrics
    assert api_client.get("/readyz").status_code == 200


def test_bad_input_is_a_json_error_with_its_status(api_client: TestClient) -> None:
    response = post(api_client, "What?", [b"%PDF-1.7"], lang="zh")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "image_unsupported"
    assert "格式" in response.json()["error"]["message"]
    too_many = post(api_client, "What?", [png()] * 4)
    assert too_many.status_code == 400
    assert too_many.json()["error"]["code"] == "too_many_images"
    # a header that checks out and pixels that do not: found before any work, still
    # (the pixels are decoded lazily, once the embedding cache has missed)
    broken = post(api_client, "What?", [png(), png()[:60]])
    assert broken.status_code == 400 and broken.json()["error"]["code"] == "image_unreadable"
    empty = post(api_client, "   ", [png()])
    assert empty.status_code == 400 and empty.json()["error"]["code"] == "no_question"
    assert post(api_client, "What?", [png()]).status_code == 200  # still serving


def test_options_are_bounded(api_client: TestClient) -> None:
    response = post(api_client, "What?", [png()], max_new_tokens="999999")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "bad_option"
    ok = lines(post(api_client, "What?", [png()], max_new_tokens="3"))
    assert ok[-1]["type"] == "done" and ok[-1]["completion_tokens"] <= 3


def test_ask_needs_a_logged_in_tenant(tmp_path: Path, tiny_model: Path) -> None:
    settings = tiny_settings(tmp_path / "home")
    with TestClient(create_app(settings)) as client:
        response = post(client, "What?", [png()])
    assert response.status_code == 401


def test_other_tenants_conversation_is_not_found(api_client: TestClient) -> None:
    from qwen_ui.auth.principal import Principal

    done = lines(post(api_client, "What?", [png()]))[-1]
    log_in(api_client, Principal("other", "eve"))
    response = post(api_client, "And?", [], conversation_id=str(done["conversation_id"]))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "conversation_not_found"


def test_preload_loads_at_start_up(tmp_path: Path, tiny_model: Path) -> None:
    import time

    settings = tiny_settings(tmp_path / "home", preload=True)
    ModelStore(settings.model_path).install(tiny_model, TINY_ID, "bf16")
    with TestClient(create_app(settings)) as client:
        deadline = time.monotonic() + 30
        while client.get("/healthz").json()["engine"] != "ready":
            assert time.monotonic() < deadline, "preload never finished"
            time.sleep(0.05)
        assert services_of(client.app).engine.pipelines.is_loaded


def test_first_question_installs_the_shipped_demo(tmp_path: Path) -> None:
    from qwen_ui.demo.install import shipped_revisions
    from qwen_ui.settings import DEMO_MODEL_ID, Settings

    settings = Settings(home=tmp_path / "home", model_revision="awq", max_new_tokens=4)
    assert "awq" in shipped_revisions()
    with TestClient(create_app(settings)) as client:
        store = services_of(client.app).store
        assert not store.is_installed(DEMO_MODEL_ID, "awq")  # nothing happens at start-up
        log_in(client)
        events = lines(post(client, "How many shapes are there?", [png()]))
        assert events[-1]["type"] == "done", events[-1]
        assert store.is_installed(DEMO_MODEL_ID, "awq")


def test_done_line_carries_the_boxes(
    api_client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer = '```json\n[{"bbox_2d": [0, 0, 28, 28], "label": "red circle"}]\n```'
    force_answer(monkeypatch, services_of(api_client.app).engine, answer)
    done = lines(post(api_client, "Where is the red circle?", [png((56, 56))]))[-1]
    assert done["type"] == "done" and done["answer"] == answer
    assert done["boxes"] == [{"image": 1, "label": "red circle", "box": [0, 0, 28, 28]}]
    assert done["answer_text"] == "red circle"
