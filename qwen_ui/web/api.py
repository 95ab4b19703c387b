"""``POST /api/v1/ask``: images and a question in (multipart), engine events out as
newline-delimited JSON. Also the engine's start/stop for the app's lifespan.

Input errors that the engine reports before any work started (its first event is
``failed``) come back as the usual JSON error with their HTTP status; once streaming has
begun, a failure is the last line (``{"type": "failed", ...}``). A client that goes away
cancels the answer: the response task is cancelled, which closes the engine's iterator.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, File, Form, Request, UploadFile
from fastapi.responses import JSONResponse, Response, StreamingResponse

from qwen_ui.auth.principal import Principal
from qwen_ui.auth.web import require_principal
from qwen_ui.engine.engine import AskOptions, AskRequest, Engine
from qwen_ui.engine.errors import ImageTooLarge, TooManyImages
from qwen_ui.engine.events import Event, Failed, Stage
from qwen_ui.engine.metrics import EngineMetrics
from qwen_ui.errors import ModelNotInstalled, QwenUIError
from qwen_ui.settings import DEMO_MODEL_ID, Settings
from qwen_ui.web.asking import ask_as
from qwen_ui.web.errors import error_response
from qwen_ui.web.i18n import LANGS, negotiate

log = logging.getLogger(__name__)

router = APIRouter(prefix="/api/v1")
NDJSON = "application/x-ndjson"


def request_lang(request: Request, explicit: str | None) -> str:
    if explicit in LANGS:
        return str(explicit)
    return negotiate(request.headers.get("accept-language"), request.app.state.settings.language)


@router.post("/ask")
async def ask(
    request: Request,
    principal: Annotated[Principal, Depends(require_principal)],
    question: Annotated[str, Form()],
    images: Annotated[list[UploadFile] | None, File()] = None,
    conversation_id: Annotated[str | None, Form()] = None,
    max_new_tokens: Annotated[int | None, Form()] = None,
    temperature: Annotated[float | None, Form()] = None,
    top_p: Annotated[float | None, Form()] = None,
    seed: Annotated[int | None, Form()] = None,
    lang: Annotated[str | None, Form()] = None,
) -> Response:
    settings: Settings = request.app.state.settings
    blobs = await read_images(images or [], settings)
    ask_request = AskRequest(
        tenant=principal.tenant,
        user=principal.user,
        question=question,
        images=blobs,
        conversation_id=conversation_id or None,
        options=AskOptions(max_new_tokens, temperature, top_p, seed),
        lang=request_lang(request, lang),
    )
    events = ask_as(request.app, principal, ask_request)
    head = await _checked_head(events)
    if isinstance(head[-1], Failed):
        await events.aclose()
        failed = head[-1]
        body: dict[str, object] = {
            "code": failed.code,
            "message": failed.message,
            "status": failed.status,
        }
        if failed.conversation_id is not None:  # it holds this request's images
            body["conversation_id"] = failed.conversation_id
        headers = {}
        if failed.retry_after is not None:  # busy: when to try again
            body["retry_after"] = failed.retry_after
            headers["Retry-After"] = str(max(1, round(failed.retry_after)))
        return JSONResponse({"error": body}, status_code=failed.status, headers=headers)
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(_lines(head, events), media_type=NDJSON, headers=headers)


async def _checked_head(events: AsyncIterator[Event]) -> list[Event]:
    """The events up to the end of the input checks (image decoding): a failure among them
    becomes an HTTP error; anything later is streamed."""
    head: list[Event] = []
    async for event in events:
        head.append(event)
        if not (isinstance(event, Stage) and event.stage == "decoding"):
            break
    return head


async def read_images(files: list[UploadFile], settings: Settings) -> list[bytes]:
    """Count and size are checked before a byte is read into memory."""
    if len(files) > settings.max_images:
        raise TooManyImages(count=len(files), limit=settings.max_images)
    blobs = []
    for index, upload in enumerate(files, start=1):
        if upload.size is not None and upload.size > settings.max_image_bytes:
            raise _too_large(index, upload.size, settings)
        data = await upload.read(settings.max_image_bytes + 1)
        if len(data) > settings.max_image_bytes:
            raise _too_large(index, len(data), settings)
        blobs.append(data)
    return blobs


def _too_large(index: int, size: int, settings: Settings) -> QwenUIError:
    mb = 1024 * 1024
    return ImageTooLarge(
        index=index, size_mb=f"{size / mb:.1f}", limit_mb=f"{settings.max_image_bytes / mb:.1f}"
    )


async def _lines(head: list[Event], events: AsyncIterator[Event]) -> AsyncIterator[bytes]:
    async with aclosing(events):  # type: ignore[type-var]
        for event in head:
            yield (event.to_json() + "\n").encode()
        async for event in events:
            yield (event.to_json() + "\n").encode()


# --- life cycle (called from server.lifespan) -------------------------------------------


def init(app: FastAPI) -> None:
    """Synchronous part (create_app): the engine's metrics live as long as the app."""
    app.state.engine = None
    app.state.engine_metrics = EngineMetrics(app.state.metrics.registry)


async def start_engine(app: FastAPI) -> None:
    settings: Settings = app.state.settings
    engine = Engine(
        settings,
        DemoInstallingStore(app.state.store),
        app.state.state,
        status=app.state.engine_status,
        metrics=app.state.engine_metrics,
        admission=getattr(app.state, "admission", None),
    )
    engine.start()
    app.state.engine = engine
    app.state.answering = True
    if settings.preload:
        app.state.preload_task = asyncio.create_task(engine.preload())


class DemoInstallingStore:
    """The app's store, except that resolving the shipped demo model installs it first
    when missing (first question on a fresh home: a local copy and hash, well under a
    second). Every other model must be installed by the operator."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def resolve(self, model_id: str, revision: str) -> Any:
        try:
            return self.store.resolve(model_id, revision)
        except ModelNotInstalled:
            if model_id != DEMO_MODEL_ID:
                raise
        from qwen_ui.demo.install import ensure_demo

        if ensure_demo(self.store, revision):
            log.info("installed the shipped demo model %s@%s", model_id, revision)
        return self.store.resolve(model_id, revision)


async def stop_engine(app: FastAPI) -> None:
    engine: Engine | None = getattr(app.state, "engine", None)
    task: Any = getattr(app.state, "preload_task", None)
    if task is not None and not task.done():
        task.cancel()
    if engine is not None:
        await engine.close()
    app.state.engine = None
    app.state.answering = False


__all__ = ["error_response", "router"]
