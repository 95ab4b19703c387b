"""Wiring admission into the app: metrics on the app's registry (``create_app``) and the
engine's admission seam on ``app.state.admission`` (lifespan, before the engine starts),
with each tenant's concurrent-request limit read from the tenants file."""

from __future__ import annotations

from fastapi import FastAPI

from qwen_ui.admission.metrics import AdmissionMetrics
from qwen_ui.admission.seam import EngineAdmission, build
from qwen_ui.auth.tenants import Limits
from qwen_ui.engine.engine import Engine


def init(app: FastAPI) -> None:
    app.state.admission_metrics = AdmissionMetrics(app.state.metrics.registry)


def start(app: FastAPI) -> EngineAdmission:
    def engine() -> Engine | None:
        return getattr(app.state, "engine", None)

    def tenant_limit(tenant: str) -> int:
        found = app.state.auth.registry.get(tenant)
        limits = found.limits if found is not None else Limits()  # type: ignore[call-arg]
        return int(limits.concurrent_requests)

    admission = build(app.state.settings, engine, app.state.admission_metrics, tenant_limit)
    app.state.admission = admission
    return admission
