"""Every question through the web layer counts against the tenant's daily quota and leaves
exactly one audit line, however it ends."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from qwen_ui.auth.tenants import Limits
from qwen_ui.server import create_app
from qwen_ui.services import services_of
from qwen_ui.store import ModelStore
from tests.engine.conftest import TINY_ID, png, tiny_settings
from tests.engine.support import build_tiny_model
from tests.support.auth import add_tenants, local_tenant, log_in
from tests.web.test_api import post


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "bf16")


@pytest.fixture
def api_client(tmp_path: Path, tiny_model: Path) -> Iterator[TestClient]:
    settings = tiny_settings(tmp_path / "home")
    ModelStore(settings.model_path).install(tiny_model, TINY_ID, "bf16")
    tenant = local_tenant("demo", ("demo",))
    limited = tenant.model_copy(update={"limits": Limits(questions_per_day=3)})
    add_tenants(settings.tenants_path, limited)
    with TestClient(create_app(settings)) as client:
        log_in(client)
        yield client


def questions(client: TestClient) -> list[dict[str, Any]]:
    audit = services_of(client.app).auth.audit.path
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    return [line for line in lines if line["event"] == "question"]


def test_one_audit_line_per_question_with_outcome(api_client: TestClient) -> None:
    image = png()
    assert post(api_client, "What shape is it?", [image]).status_code == 200
    assert post(api_client, "What?", [b"%PDF-1.7"]).status_code == 400
    answered, failed = questions(api_client)
    assert (answered["tenant"], answered["user"]) == ("demo", "demo")
    assert answered["outcome"] == "answered"
    assert answered["counts"]["images"] == 1 and answered["counts"]["completion_tokens"] > 0
    assert answered["timings"]["total"] > 0
    assert failed["outcome"] == "failed:image_unsupported"
    assert answered["request_id"] != failed["request_id"]
    text = services_of(api_client.app).auth.audit.path.read_text()
    assert "What shape" not in text  # never the question, never image bytes


def test_daily_quota_refuses_with_retry_after(api_client: TestClient) -> None:
    for _ in range(3):
        assert post(api_client, "What?", [png()]).status_code == 200
    refused = post(api_client, "What?", [png()])
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "quota_exceeded"
    assert 0 < int(refused.headers["Retry-After"]) <= 86400
    assert len(questions(api_client)) == 3  # refused before any work: no question ran
