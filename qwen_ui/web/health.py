"""Probes: /healthz for the load balancer (liveness), /readyz for readiness."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from qwen_ui import __version__
from qwen_ui.engine.remote import RemoteEngine
from qwen_ui.engine.status import EngineState
from qwen_ui.errors import QwenUIError
from qwen_ui.services import ServicesDep
from qwen_ui.state import unreachable

router = APIRouter()


@router.get("/healthz", include_in_schema=False)
async def healthz(services: ServicesDep) -> JSONResponse:
    """Never waits on the model, Redis or OSS; 503 only while the default model has
    failed. ``models``: every offered model's state (``not_loaded``, ``loading``,
    ``ready``, ``failed``; ``draining`` for a retired one still finishing requests)."""
    settings, status, models = services.settings, services.status, services.models
    failed = status.state is EngineState.FAILED
    model_id, _, revision = models.default.name.partition("@")
    body: dict[str, object] = {
        "status": "failed" if failed else "ok",
        "version": __version__,
        "model": model_id,
        "revision": revision,
        "engine": status.state.value,
        "models": models.health(),
    }
    if failed:
        body["reason"] = status.reason
    engine = services.engine
    if isinstance(engine, RemoteEngine):  # its last known state, never probed here
        body.update(model=settings.remote_model, revision=None)
        return JSONResponse({**body, "remote": engine.health.to_dict()})
    return JSONResponse(body, status_code=503 if failed else 200)


@router.get("/readyz", include_in_schema=False)
async def readyz(services: ServicesDep) -> JSONResponse:
    """200 only when the model is loaded and has answered once (remote engine: when the
    remote's /models answers, within a few seconds) and every configured dependency (the
    Redis state store) answers within ``readiness_timeout_s``."""
    status, engine = services.status, services.engine
    if isinstance(engine, RemoteEngine):  # nothing loads here: ready when the remote answers
        problem = await _remote_problem(engine)
        reasons = [] if problem is None else [f"remote: {problem}"]
    else:
        reasons = [] if status.is_ready else [f"engine: {status.not_ready_reason()}"]
    state_problem = await unreachable(services.state, services.settings.readiness_timeout_s)
    if state_problem is not None:
        reasons.append(state_problem)
    ready = not reasons
    body: dict[str, object] = {
        "ready": ready,
        "status": "ready" if ready else "not ready",
        "engine": "remote" if isinstance(engine, RemoteEngine) else status.state.value,
    }
    if not ready:
        body["reasons"] = reasons
        body["reason"] = "; ".join(reasons)
    return JSONResponse(body, status_code=200 if ready else 503)


async def _remote_problem(engine: RemoteEngine) -> str | None:
    try:
        await engine.probe()
    except QwenUIError as exc:
        return exc.message("en")
    return None
