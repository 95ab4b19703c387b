"""``POST /v1/chat/completions`` and ``GET /v1/models``: the OpenAI protocol over the same
engine call as ``/api/v1/ask`` (quota, admission, audit and the tenant's embedding cache
included, through :func:`qwen_ui.web.asking.ask_as`).

Stateless: the conversation is the request's messages (images of earlier turns included);
nothing is stored. The caller is a tenant API token (``Authorization: Bearer``) or a login
session; the token is checked before the body is read. Errors use OpenAI's error object.

Extension, always present and ignored by stock clients: the boxes the answer located
(grounding), ``{"image": i, "label": "…", "box": [x1, y1, x2, y2]}`` on the original image
files' pixels, ``i`` 1-based among all the images of the request's messages, in order: in
``choices[0].message.boxes``, and when streaming in ``choices[0].delta.boxes`` of the chunk
that carries ``finish_reason`` (``[]`` when none, or when a stop sequence ended the answer).
The ``content`` stays the model's own words.

Extension (opt-in, ignored by stock clients): ``"qwen_ui": {"stages": true}`` in the
request adds our stage events: streamed as extra chunks with empty ``choices`` and a
``qwen_ui`` field (``{"type": "stage", ...}`` with its ``label``; at the end
``{"type": "done", ...}`` with timings and cache hits), or, without streaming, a
``qwen_ui`` field of the completion (``stages`` and ``done``).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from qwen_ui.auth.principal import Principal
from qwen_ui.engine.engine import AskRequest, PastTurn
from qwen_ui.engine.errors import TooManyImages
from qwen_ui.engine.events import Done, Event, Failed, Stage, Token
from qwen_ui.models.errors import UnknownModel
from qwen_ui.services import Services, ServicesDep
from qwen_ui.settings import Settings
from qwen_ui.web import openai_wire as wire
from qwen_ui.web.api import checked_head
from qwen_ui.web.asking import ask_as
from qwen_ui.web.auth import PrincipalDep
from qwen_ui.web.body import too_large
from qwen_ui.web.errors import request_lang
from qwen_ui.web.openai_images import read_image_urls

router = APIRouter(prefix="/v1")
STARTED = int(time.time())


def served_model(services: Services, model: str) -> str:
    """The offered model ``model`` names (``OWNER/NAME@REV``, or ``OWNER/NAME`` for its
    first offered revision; the remote's name with ``engine=openai``)."""
    try:
        return services.models.entry(model).name
    except UnknownModel as unknown:
        offered = unknown.params["offered"]
        raise wire.ModelNotServed(model=model[:200], offered=offered, param="model") from None


@router.get("/models")
async def list_models(services: ServicesDep, principal: PrincipalDep) -> JSONResponse:
    """Every offered model, the default first."""
    return JSONResponse(wire.model_list(services.models.names, STARTED))


@router.post("/chat/completions")
async def chat_completions(
    request: Request, services: ServicesDep, principal: PrincipalDep
) -> Response:
    settings = services.settings
    call = wire.parse(await read_json(request, settings))
    model = served_model(services, call.model)
    if call.image_count > settings.max_images:
        raise TooManyImages(count=call.image_count, limit=settings.max_images)
    ask_request = await _ask_request(request, services, principal, call)
    events = ask_as(services, principal, ask_request, model)
    head = await checked_head(events)
    if isinstance(head[-1], Failed):
        await events.aclose()
        return failed_response(head[-1])
    reply = wire.Reply(id=f"chatcmpl-{ask_request.request_id}", model=model)
    items = answer_items(head, events, call.stops)
    if call.stream:
        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        stream = _sse(reply, call, items, ask_request.lang)
        return StreamingResponse(stream, media_type="text/event-stream", headers=headers)
    return await _complete(reply, call, items, ask_request.lang)


async def read_json(request: Request, settings: Settings) -> object:
    """The JSON body, at most ``max_request_bytes`` (the request guard enforces the same
    limit; images count base64-encoded here)."""
    limit = settings.max_request_bytes
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large(limit)
    try:
        return json.loads(body)
    except ValueError:
        raise wire.BadField(param="body", reason="not valid JSON") from None


async def _ask_request(
    request: Request, services: Services, principal: Principal, call: wire.ChatCall
) -> AskRequest:
    turns = [user for user, _ in call.history] + [call.question]
    urls = [url for turn in turns for url in turn.image_urls]
    blobs = iter(await read_image_urls(request, services, principal, urls))
    images = [[next(blobs) for _ in turn.image_urls] for turn in turns]
    history = [
        PastTurn(user.text, answer, images[i]) for i, (user, answer) in enumerate(call.history)
    ]
    return AskRequest(
        tenant=principal.tenant,
        question=call.question.text,
        images=images[-1],
        options=call.options,
        lang=request_lang(request),
        history=history,
    )


def failed_response(failed: Failed) -> JSONResponse:
    headers = {}
    if failed.retry_after is not None:
        headers["Retry-After"] = str(max(1, round(failed.retry_after)))
    body = wire.error_body(failed.code, failed.message, failed.status)
    return JSONResponse(body, status_code=failed.status, headers=headers)


# --- from engine events to answer items ---------------------------------------------------


@dataclass(frozen=True)
class End:
    finish: str
    usage: dict[str, int]
    done: Done | None  # None when a stop sequence ended the answer early


class StopScan:
    """Text deltas with the stop sequences cut out: holds back just enough text to see a
    stop sequence that arrives split over several deltas."""

    def __init__(self, stops: list[str]) -> None:
        self.stops = stops
        self.hold = max((len(s) for s in stops), default=1) - 1
        self.held = ""

    def push(self, text: str) -> tuple[str, bool]:
        buffer = self.held + text
        hits = [buffer.find(s) for s in self.stops if s in buffer]
        if hits:
            self.held = ""
            return buffer[: min(hits)], True
        cut = max(0, len(buffer) - self.hold)
        self.held = buffer[cut:]
        return buffer[:cut], False

    def flush(self) -> str:
        held, self.held = self.held, ""
        return held


async def answer_items(
    head: Iterable[Event], events: AsyncIterator[Event], stops: list[str]
) -> AsyncIterator[Stage | str | End | Failed]:
    """Stages, text deltas, then one End or Failed. A stop sequence closes the engine's
    iterator, which cancels the generation."""
    scan, count, prompt_tokens = StopScan(stops), 0, 0
    async with aclosing(events):  # type: ignore[type-var]
        async for event in _chained(head, events):
            if isinstance(event, Stage):
                prompt_tokens = event.prompt_tokens or prompt_tokens
                yield event
            elif isinstance(event, Token):
                count = event.count
                text, stopped = scan.push(event.text)
                if text:
                    yield text
                if stopped:
                    yield End("stop", wire.usage(prompt_tokens, count), None)
                    return
            elif isinstance(event, Done):
                if rest := scan.flush():
                    yield rest
                usage = wire.usage(event.prompt_tokens, event.completion_tokens)
                yield End(event.finish_reason, usage, event)
            elif isinstance(event, Failed):
                yield event


async def _chained(head: Iterable[Event], events: AsyncIterator[Event]) -> AsyncIterator[Event]:
    for event in head:
        yield event
    async for event in events:
        yield event


def boxes_of(end: End) -> list[dict[str, Any]]:
    """The located boxes of a finished answer (none when a stop sequence cut it)."""
    return [] if end.done is None else list(end.done.boxes)


def stage_extra(stage: Stage, lang: str) -> dict[str, Any]:
    return {**stage.to_dict(), "label": stage.label(lang)}


def done_extra(done: Done | None) -> dict[str, Any]:
    if done is None:
        return {"type": "done", "stopped_by_sequence": True}
    body = done.to_dict()
    for key in ("answer", "conversation_id", "progress"):
        body.pop(key, None)
    return body


def _sse_line(body: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(body, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()


async def _sse(
    reply: wire.Reply,
    call: wire.ChatCall,
    items: AsyncIterator[Stage | str | End | Failed],
    lang: str,
) -> AsyncIterator[bytes]:
    async with aclosing(items):  # type: ignore[type-var]
        yield _sse_line(reply.chunk({"role": "assistant", "content": ""}))
        async for item in items:
            if isinstance(item, Stage):
                if call.stages:
                    yield _sse_line(reply.chunk(extra=stage_extra(item, lang)))
            elif isinstance(item, str):
                yield _sse_line(reply.chunk({"content": item}))
            elif isinstance(item, Failed):
                yield _sse_line(wire.error_body(item.code, item.message, item.status))
                return
            else:
                if call.stages:
                    yield _sse_line(reply.chunk(extra=done_extra(item.done)))
                yield _sse_line(reply.chunk({"boxes": boxes_of(item)}, finish=item.finish))
                if call.include_usage:
                    yield _sse_line(reply.chunk(usage=item.usage))
        yield b"data: [DONE]\n\n"


async def _complete(
    reply: wire.Reply,
    call: wire.ChatCall,
    items: AsyncIterator[Stage | str | End | Failed],
    lang: str,
) -> Response:
    texts: list[str] = []
    stages: list[dict[str, Any]] = []
    async with aclosing(items):  # type: ignore[type-var]
        async for item in items:
            if isinstance(item, Stage):
                stages.append(stage_extra(item, lang))
            elif isinstance(item, str):
                texts.append(item)
            elif isinstance(item, Failed):
                return failed_response(item)
            else:
                extra = {"stages": stages, "done": done_extra(item.done)} if call.stages else None
                body = reply.completion(
                    "".join(texts), item.finish, item.usage, extra, boxes_of(item)
                )
                return JSONResponse(body, headers={"Cache-Control": "no-store"})
    return failed_response(Failed("answer_failed", "The answer ended without a result.", 500))
