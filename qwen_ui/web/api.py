"""``POST /api/v1/ask``: images and a question in (multipart), engine events out as
newline-delimited JSON.

``model`` (optional, ``OWNER/NAME@REV``) picks one of the offered models (an unknown one is
a 404 ``model_not_found``); without it a follow-up goes to its conversation's model, anything
else to the default. The response names the model in ``X-Qwen-UI-Model`` and the ``done``
line in ``"model"``.

Input errors that the engine reports before any work started (its first event is
``failed``) come back as the usual JSON error with their HTTP status; once streaming has
begun, a failure is the last line (``{"type": "failed", ...}``). A client that goes away
cancels the answer: the response task is cancelled, which closes the engine's iterator.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Annotated

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import JSONResponse, Response, StreamingResponse

from qwen_ui.engine.engine import AskRequest
from qwen_ui.engine.errors import ImageTooLarge, TooManyImages
from qwen_ui.engine.events import Event, Failed, Stage
from qwen_ui.errors import QwenUIError, error_body
from qwen_ui.services import ServicesDep
from qwen_ui.settings import Settings
from qwen_ui.web.asking import ask_as
from qwen_ui.web.auth import PrincipalDep
from qwen_ui.web.errors import error_response, failure_response, request_lang
from qwen_ui.web.options import ask_lang, ask_options

log = logging.getLogger(__name__)

router = APIRouter(prefix="/api/v1")
NDJSON = "application/x-ndjson"
MODEL_HEADER = "X-Qwen-UI-Model"  # the model the request was routed to (OWNER/NAME@REV)


@router.post("/ask")
async def ask(
    request: Request,
    services: ServicesDep,
    principal: PrincipalDep,
    question: Annotated[str, Form()],
    images: Annotated[list[UploadFile] | None, File()] = None,
    conversation_id: Annotated[str | None, Form()] = None,
    max_new_tokens: Annotated[str | None, Form()] = None,
    temperature: Annotated[str | None, Form()] = None,
    top_p: Annotated[str | None, Form()] = None,
    seed: Annotated[str | None, Form()] = None,
    lang: Annotated[str | None, Form()] = None,
    model: Annotated[str | None, Form()] = None,
) -> Response:
    settings = services.settings
    options = ask_options(settings, max_new_tokens, temperature, top_p, seed)
    answer_lang = request_lang(request, ask_lang(lang))
    blobs = await read_images(images or [], settings)
    ask_request = AskRequest(
        tenant=principal.tenant,
        user=principal.user,
        question=question,
        images=blobs,
        conversation_id=conversation_id or None,
        options=options,
        lang=answer_lang,
    )
    answering = (await services.models.route(ask_request, model)).name  # 400 when unknown
    events = ask_as(services, principal, ask_request, answering)
    head = await checked_head(events)
    if isinstance(head[-1], Failed):
        await events.aclose()
        failed = head[-1]
        response = failure_response(failed.code, failed.message, failed.status, failed.retry_after)
        if failed.conversation_id is not None:  # it holds this request's images
            body = error_body(failed.code, failed.message, failed.status, failed.retry_after)
            body["error"]["conversation_id"] = failed.conversation_id
            retry = response.headers.get("Retry-After")
            return JSONResponse(body, failed.status, {"Retry-After": retry} if retry else None)
        return response
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no", MODEL_HEADER: answering}
    return StreamingResponse(_lines(head, events), media_type=NDJSON, headers=headers)


async def checked_head(events: AsyncIterator[Event]) -> list[Event]:
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


__all__ = ["error_response", "router"]
