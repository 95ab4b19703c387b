"""Probes: /healthz for the load balancer (liveness), /readyz for readiness."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from qwen_ui import __version__
from qwen_ui.engine.status import EngineState
from qwen_ui.services import ServicesDep

router = APIRouter()


@router.get("/healthz", include_in_schema=False)
async def healthz(services: ServicesDep) -> JSONResponse:
    """Never waits on the model, Redis or OSS; 503 only while the engine has failed."""
    settings, status = services.settings, services.status
    failed = status.state is EngineState.FAILED
    body: dict[str, str | None] = {
        "status": "failed" if failed else "ok",
        "version": __version__,
        "model": settings.model_id,
        "revision": settings.model_revision,
        "engine": status.state.value,
    }
    if failed:
        body["reason"] = status.reason
    return JSONResponse(body, status_code=503 if failed else 200)


@router.get("/readyz", include_in_schema=False)
async def readyz(services: ServicesDep) -> JSONResponse:
    """200 only when the model is loaded and has answered once."""
    status = services.status
    if status.is_ready:
        return JSONResponse({"status": "ready", "engine": status.state.value})
    body = {
        "status": "not ready",
        "engine": status.state.value,
        "reason": status.not_ready_reason(),
    }
    return JSONResponse(body, status_code=503)
