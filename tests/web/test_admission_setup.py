"""Admission wiring: the seam on app.state, tenant limits from the tenants file, metrics on
the app's registry."""

from __future__ import annotations

from fastapi.testclient import TestClient

from qwen_ui.auth.tenants import Limits, Tenant
from qwen_ui.server import create_app
from qwen_ui.settings import Settings
from tests.support import auth as auth_support


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
        admission = app.state.admission
        assert app.state.engine.admission is admission
        controller = admission.controller
        assert controller.tenant_limit("acme") == 7
        assert controller.tenant_limit("unknown") == Limits().concurrent_requests  # type: ignore[call-arg]
        assert controller.budget == settings.cpu_budget_bytes  # the CPU budget
        metrics = client.get("/metrics").text
    for name in (
        "qwen_ui_admission_budget_bytes",
        "qwen_ui_admission_in_use_bytes",
        "qwen_ui_admission_queue_length",
        "qwen_ui_admission_wait_seconds_bucket",
        'qwen_ui_admission_refusals_total{reason="never_fits"}',
    ):
        assert name in metrics
