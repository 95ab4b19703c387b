"""The app's services: built once in lifespan, reached through one accessor; admission
wired with tenant limits from the tenants file and metrics on the app's registry."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from qwen_ui.admission.budget import pool_reserve
from qwen_ui.auth.tenants import Limits, Tenant
from qwen_ui.engine.remote import RemoteEngine
from qwen_ui.errors import NotStarted
from qwen_ui.server import create_app
from qwen_ui.services import Services, maybe_services, services_of
from qwen_ui.settings import Settings
from tests.support import auth as auth_support

PACKAGE = Path(__file__).resolve().parent.parent / "qwen_ui"


def test_seam_limits_and_metrics(settings: Settings) -> None:
    tenant = Tenant(
        id="acme",
        kind="local",
        users={"u": auth_support.test_password_hash()},
        limits=Limits(concurrent_requests=7),  # type: ignore[call-arg]
    )
    auth_support.add_tenants(settings.tenants_path, tenant)
    app = create_app(settings)
    with TestClient(app) as client:
        services = services_of(app)
        admission = services.admission
        assert services.engine.admission is admission
        controller = admission.controller
        assert controller.tenant_limit("acme") == 7
        assert controller.tenant_limit("unknown") == Limits().concurrent_requests  # type: ignore[call-arg]
        # the CPU budget, less the idle KV caches the worker may keep (a batch's slots)
        kept = pool_reserve(settings, admission.placement)
        assert controller.budget == settings.cpu_budget_bytes - kept
        metrics = client.get("/metrics").text
    for name in (
        "qwen_ui_admission_budget_bytes",
        "qwen_ui_admission_in_use_bytes",
        "qwen_ui_admission_queue_length",
        "qwen_ui_admission_wait_seconds_bucket",
        'qwen_ui_admission_refusals_total{reason="never_fits"}',
    ):
        assert name in metrics


def test_remote_engine_admits_within_the_tenants_limits(home: Path) -> None:
    settings = Settings(
        home=home,
        engine="openai",
        remote_base_url="http://127.0.0.1:9/v1",  # never asked here
        remote_model="Qwen/Qwen2.5-VL-7B-Instruct",
        remote_max_concurrency=5,
    )
    tenant = Tenant(
        id="acme",
        kind="local",
        users={"u": auth_support.test_password_hash()},
        limits=Limits(concurrent_requests=3),  # type: ignore[call-arg]
    )
    auth_support.add_tenants(settings.tenants_path, tenant)
    app = create_app(settings, ui=False)
    with TestClient(app):
        engine = services_of(app).engine
        assert isinstance(engine, RemoteEngine)
        controller = engine.gate.controller
        assert (controller.budget, controller.tenant_limit("acme")) == (5, 3)
        assert controller.tenant_limit("unknown") == Limits().concurrent_requests  # type: ignore[call-arg]


def test_services_live_as_long_as_the_lifespan(settings: Settings) -> None:
    app = create_app(settings, ui=False)
    with pytest.raises(NotStarted):
        services_of(app)
    with TestClient(app) as client:
        services = services_of(app)
        assert isinstance(services, Services) and services.answering
        assert services.settings is settings
        assert client.get("/healthz").json()["engine"] == "idle"
    assert maybe_services(app) is None
    assert not services.answering and not services.engine.worker.alive


def test_routes_answer_starting_before_the_services_exist(settings: Settings) -> None:
    client = TestClient(create_app(settings, ui=False))  # no lifespan: never started
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "starting"


def test_nothing_reads_app_state_but_the_services_module() -> None:
    readers = [
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if re.search(
            r"app\.state|getattr\([^)]*\.state\b|getattr\(\w+, \"state\"", path.read_text()
        )
    ]
    assert readers == ["services.py"]
