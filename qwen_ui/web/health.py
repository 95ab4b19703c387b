"""Probes: /healthz for the load balancer (liveness), /readyz for readiness."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from qwen_ui import __version__
from qwen_ui.engine.status import EngineState
from qwen_ui.errors import QwenUIError

router = APIRouter()


@router.get("/healthz", include_in_schema=False)
async def healthz(request: Request) -> JSONResponse:
    """Never waits on the model, Redis or OSS; 503 only while the engine has failed."""
    settings = request.app.state.settings
    status = request.app.state.engine_status
    failed = status.state is EngineState.FAILED
    body = {
        "status": "failed" if failed else "ok",
        "version": __version__,
        "model": settings.model_id,
        "revision": settings.model_revision,
        "engine": status.state.value,
    }
    if failed:
        body["reason"] = status.reason
    remote = getattr(getattr(request.app.state, "engine", None), "health", None)
    if settings.engine == "openai" and remote is not None:  # last known, never probed here
        body.update(model=settings.remote_model, revision=None, remote=remote.to_dict())
    return JSONResponse(body, status_code=503 if failed else 200)


@router.get("/readyz", include_in_schema=False)
async def readyz(request: Request) -> JSONResponse:
    """200 only when the model is loaded and has answered once (remote engine: when the
    remote's /models answers, within a few seconds)."""
    if request.app.state.settings.engine == "openai":
        return await _remote_ready(request)
    status = request.app.state.engine_status
    if status.is_ready:
        return JSONResponse({"status": "ready", "engine": status.state.value})
    body = {
        "status": "not ready",
        "engine": status.state.value,
        "reason": status.not_ready_reason(),
    }
    return JSONResponse(body, status_code=503)


async def _remote_ready(request: Request) -> JSONResponse:
    engine = getattr(request.app.state, "engine", None)
    if engine is None:
        return JSONResponse({"status": "not ready", "reason": "starting"}, status_code=503)
    try:
        await engine.probe()
    except QwenUIError as exc:
        body = {"status": "not ready", "engine": "remote", "reason": exc.message("en")}
        return JSONResponse(body, status_code=503)
    return JSONResponse({"status": "ready", "engine": "remote"})
