"""GET /api/v1/conversations/{id}/export over the in-process app: a conversation asked
through /api/v1/ask (tiny model, its answer forced to a Qwen2.5-VL box) comes back as
JSON and as a zip, for its owner only."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from qwen_ui.auth.principal import Principal
from qwen_ui.auth.tokens import add_token, new_token
from qwen_ui.server import create_app
from qwen_ui.services import services_of
from qwen_ui.store import ModelStore
from tests.engine.conftest import TINY_ID, png, tiny_settings
from tests.engine.support import build_tiny_model, force_answer
from tests.support.auth import add_tenants, local_tenant, log_in
from tests.web.test_api import lines, post

ANSWER = '```json\n[{"bbox_2d": [0, 0, 28, 28], "label": "red circle"}]\n```'


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "bf16")


@pytest.fixture
def client(tmp_path: Path, tiny_model: Path) -> Iterator[TestClient]:
    settings = tiny_settings(tmp_path / "home")
    ModelStore(settings.model_path).install(tiny_model, TINY_ID, "bf16")
    with TestClient(create_app(settings, ui=False)) as http:
        log_in(http)
        yield http


def asked(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> str:
    """A two-turn conversation of demo/demo: a located red circle, then a follow-up."""
    force_answer(monkeypatch, services_of(client.app).engine, ANSWER)
    done = lines(post(client, "Where is the red circle?", [png((56, 56))]))[-1]
    assert done["boxes"] == [{"image": 1, "label": "red circle", "box": [0, 0, 28, 28]}]
    conversation_id = str(done["conversation_id"])
    force_answer(monkeypatch, services_of(client.app).engine, "No.")
    follow = lines(post(client, "Any star?", [], conversation_id=conversation_id))[-1]
    assert follow["type"] == "done"
    return conversation_id


def export(client: TestClient, conversation_id: str, fmt: str, **params: str):  # type: ignore[no-untyped-def]
    url = f"/api/v1/conversations/{conversation_id}/export"
    return client.get(url, params={"format": fmt, **params})


def test_json_export_of_an_asked_conversation(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    conversation_id = asked(client, monkeypatch)
    response = export(client, conversation_id, "json")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert "attachment" in response.headers["content-disposition"]
    body = response.json()
    sha = hashlib.sha256(png((56, 56))).hexdigest()
    assert [i["sha256"] for i in body["images"]] == [sha]
    first, second = body["turns"]
    assert first["question"] == "Where is the red circle?" and first["answer"] == ANSWER
    assert first["answer_text"] == "red circle"
    assert first["boxes"] == [
        {"sha256": sha, "label": "red circle", "box": [0, 0, 28, 28], "image": 1}
    ]
    assert first["model"] == TINY_ID and first["revision"] == "bf16"
    stages = [s["stage"] for s in first["stages"]]
    assert stages[0] == "decoding" and "encoding" in stages and stages[-1] == "answering"
    assert first["timings"]["total"] > 0 and "prefill" in first["timings"]
    assert second["answer"] == "No." and second["boxes"] == [] and second["images"] == []
    assert [s["stage"] for s in second["stages"]].count("encoding") == 1  # the cached image
    assert second["stages"][0] == {"stage": "encoding", "index": 1, "total": 1, "cached": True}


def test_zip_export_holds_markdown_json_and_images(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    conversation_id = asked(client, monkeypatch)
    response = export(client, conversation_id, "zip", lang="zh")
    assert response.status_code == 200 and response.headers["content-type"] == "application/zip"
    assert (
        f'filename="qwen-ui-{conversation_id[:12]}.zip"' in response.headers["content-disposition"]
    )
    archive = zipfile.ZipFile(io.BytesIO(response.content))
    names = sorted(archive.namelist())
    sha = hashlib.sha256(png((56, 56))).hexdigest()
    assert names == [
        "conversation.json",
        "conversation.md",
        f"images/{sha[:16]}-boxes-1.png",
        f"images/{sha[:16]}.png",
    ]
    assert archive.read(f"images/{sha[:16]}.png") == png((56, 56))
    markdown = archive.read("conversation.md").decode()
    assert "## 问题 1" in markdown and "**回答:** red circle" in markdown  # zh frame
    assert "red circle（图片 1）" in markdown and "bbox_2d" not in markdown
    assert json.loads(archive.read("conversation.json"))["id"] == conversation_id


def test_only_the_owner_can_export(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    conversation_id = asked(client, monkeypatch)
    settings = services_of(client.app).settings
    token, record = new_token("export test")
    add_tenants(settings.tenants_path, add_token(local_tenant("demo", ("demo", "bob")), record))
    log_in(client, Principal("demo", "bob"))
    for fmt in ("zip", "json"):
        response = export(client, conversation_id, fmt)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "conversation_not_found"
    client.cookies.clear()
    as_token = client.get(
        f"/api/v1/conversations/{conversation_id}/export",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert as_token.status_code == 404  # the tenant's API token is another principal too
    assert export(client, conversation_id, "json").status_code == 401
    log_in(client)
    assert export(client, conversation_id, "json").status_code == 200


def test_a_bad_format_is_a_typed_400(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    conversation_id = asked(client, monkeypatch)
    response = export(client, conversation_id, "pdf")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "bad_option"
    assert "zip, json" in response.json()["error"]["message"]
    assert export(client, "no-such-id", "json").status_code == 404
