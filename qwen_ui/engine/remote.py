"""The remote engine (``QWEN_UI_ENGINE=openai``): the same ``ask(request) -> events`` as
the local engine, answered by an OpenAI-compatible model server. Tenants, quotas, audit,
OSS images and conversations stay on our side; no model is loaded here and no GPU is
needed.

Stages: ``decoding`` (checking images), ``queued`` (waiting for one of
``remote_max_concurrency`` slots, within the tenant's ``concurrent_requests``),
``sending``, ``waiting`` (until the first token), ``answering`` with token deltas, then
``done``. Closing the iterator closes the remote
stream. Failures of the remote are typed 502 / 504 errors (see ``remote_client``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, aclosing
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from qwen_ui.engine import images as image_checks
from qwen_ui.engine.conversations import Conversation, ConversationStore, StoredTurn
from qwen_ui.engine.engine import (
    AskRequest,
    EnteredAdmission,
    checked_question,
    conversation_of,
    recent_turns,
    sampling_for,
    sha256,
)
from qwen_ui.engine.errors import AnswerFailed
from qwen_ui.engine.events import Done, Event, Failed, Stage, Token, answering_progress
from qwen_ui.engine.generate import SamplingOptions
from qwen_ui.engine.metrics import EngineMetrics
from qwen_ui.engine.remote_client import (
    RemoteClient,
    RemoteHealth,
    RemoteTimeout,
    RemoteUnreachable,
)
from qwen_ui.engine.remote_images import data_url
from qwen_ui.engine.status import EngineStatus
from qwen_ui.errors import BadGateway, GatewayTimeout, QwenUIError
from qwen_ui.settings import Settings
from qwen_ui.state import State

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 3.0


@dataclass
class Answer:
    """What the remote's stream said, as it goes."""

    text: list[str] = field(default_factory=list)
    count: int = 0
    finish: str = "stop"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    first_token: float | None = None
    images_seen: int = 0  # images in the prompt sent, earlier turns' included


class Gate(Protocol):
    """Admission by count (``qwen_ui.admission.count.CountGate``, built by the services):
    ``gate(request, images, report)`` holds one slot around a request."""

    def __call__(
        self, request: Any, images: Sequence[Any], report: Any
    ) -> AbstractAsyncContextManager[None]: ...


class RemoteEngine:
    def __init__(
        self,
        settings: Settings,
        state: State,
        status: EngineStatus | None = None,
        metrics: EngineMetrics | None = None,
        client: RemoteClient | None = None,
        *,
        gate: Gate,
    ) -> None:
        self.settings = settings
        self.status = status or EngineStatus()
        self.metrics = metrics or EngineMetrics()
        self.client = client or RemoteClient(
            settings.remote_base_url, settings.remote_api_key, settings.remote_timeout_s
        )
        self.conversations = ConversationStore(state, settings.conversation_ttl_s)
        self.gate = gate
        self.limits = image_checks.ImageLimits(
            settings.max_image_bytes, settings.max_images, settings.max_image_pixels
        )
        self.health = RemoteHealth()
        image_checks.raise_pil_guard(settings.max_image_pixels)

    # --- life cycle --------------------------------------------------------------------
    def start(self) -> None:
        self.status.ready()  # nothing to load here

    async def preload(self) -> None:
        try:
            await self.probe()
        except QwenUIError as exc:
            log.warning("remote model server not ready: %s", exc.message("en"))

    async def close(self) -> None:
        await self.client.aclose()

    async def probe(self, timeout_s: float = PROBE_TIMEOUT_S) -> None:
        """GET /models on the remote (bounded); raises its typed error when not ready."""
        try:
            models = await self.client.models(timeout_s)
        except QwenUIError as exc:
            self._saw_failure(exc)
            raise
        self.health.up(time.time())
        if self.settings.remote_model not in models:
            log.warning("remote serves %s, not %s", models[:5], self.settings.remote_model)

    # --- the one call ------------------------------------------------------------------
    async def ask(self, request: AskRequest) -> AsyncGenerator[Event, None]:
        """The same contract as ``Engine.ask``: events, then Done or Failed; closing the
        iterator closes the remote stream."""
        outcome = "failed"
        try:
            started = time.perf_counter()
            sampling = sampling_for(self.settings, request.options)
            question = checked_question(self.settings, request.question)
            conversation = await self._conversation(request)
            checked: list[image_checks.CheckedImage] = []
            async for event in self._check(request.images, checked):
                yield event
            history = recent_turns(conversation.turns, len(checked), self.settings.max_images)
            events: asyncio.Queue[Event] = asyncio.Queue()
            admission = self.gate(
                request,
                checked,
                lambda ahead, wait_s=0.0: events.put_nowait(Stage("queued", ahead=ahead)),
            )
            answer = Answer()
            async with EnteredAdmission(admission, events) as waiting:
                async for event in waiting:
                    yield event
                yield Stage.at("sending")
                body = await self._body(request, history, question, checked, sampling)
                yield Stage.at("waiting")
                async with aclosing(self._stream(body, sampling, answer)) as stream:
                    async for event in stream:
                        yield event
            answer.images_seen = len(checked) + sum(len(turn.images) for turn in history)
            yield await self._finish(request, conversation, question, checked, answer, started)
            outcome = "done"
        except QwenUIError as exc:
            self._saw_failure(exc)
            log.info("request %s failed: %s", request.request_id, exc.code)
            yield Failed.of(exc, request.lang)
        except (asyncio.CancelledError, GeneratorExit):
            outcome = "cancelled"
            raise
        except Exception:
            log.exception("request %s failed", request.request_id)
            yield Failed.of(AnswerFailed(), request.lang)
        finally:
            self.metrics.requests.labels(outcome).inc()

    # --- steps -------------------------------------------------------------------------
    async def _conversation(self, request: AskRequest) -> Conversation:
        return await conversation_of(self.conversations, request)

    async def _check(
        self, blobs: Sequence[bytes], out: list[image_checks.CheckedImage]
    ) -> AsyncIterator[Event]:
        image_checks.check_count(len(blobs), self.limits)
        for i, data in enumerate(blobs):
            image_checks.check_bytes(data, i + 1, self.limits)
        for i, data in enumerate(blobs):
            yield Stage.at("decoding", i + 1, len(blobs))
            out.append(await asyncio.to_thread(image_checks.decode, data, i + 1, self.limits))
        self.metrics.images.observe(len(blobs))

    async def _past_image(self, request: AskRequest, sha: str) -> bytes:
        if request.history is None:
            return await self.conversations.image(request.tenant, sha)
        return {sha256(b): b for t in request.history for b in t.images}[sha]

    async def _body(
        self,
        request: AskRequest,
        history: list[StoredTurn],
        question: str,
        checked: list[image_checks.CheckedImage],
        sampling: SamplingOptions,
    ) -> dict[str, Any]:
        # images go unlabelled ("Picture n: " is the local engine's): the remote's own chat
        # template decides, and an OpenAI-compatible server may fold text parts into the
        # question (qwen-ui's own /v1 does)
        messages: list[dict[str, Any]] = []
        for turn in history:
            past = [await self._past_image(request, sha) for sha in turn.images]
            images = [
                await asyncio.to_thread(image_checks.decode, data, i + 1, self.limits)
                for i, data in enumerate(past)
            ]
            messages.append(await self._user(turn.question, images))
            messages.append({"role": "assistant", "content": turn.answer})
        messages.append(await self._user(question, checked))
        body: dict[str, Any] = {
            "model": self.settings.remote_model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        return body

    async def _user(self, text: str, images: Sequence[image_checks.CheckedImage]) -> dict[str, Any]:
        s = self.settings
        parts: list[dict[str, Any]] = []
        for image in images:
            url = await asyncio.to_thread(data_url, image, s.min_pixels, s.max_pixels)
            parts.append(
                {
                    "type": "image_url",
                    "image_url": {"url": url},
                    "min_pixels": s.min_pixels,
                    "max_pixels": s.max_pixels,
                }
            )
        parts.append({"type": "text", "text": text})
        return {"role": "user", "content": parts}

    async def _stream(
        self, body: dict[str, Any], sampling: SamplingOptions, answer: Answer
    ) -> AsyncGenerator[Event, None]:
        async with aclosing(self.client.stream_chat(body)) as chunks:
            async for chunk in chunks:
                self.health.up(time.time())
                if usage := chunk.get("usage"):
                    answer.prompt_tokens = int(usage.get("prompt_tokens") or 0)
                    answer.completion_tokens = int(usage.get("completion_tokens") or 0)
                for choice in chunk.get("choices") or []:
                    if choice.get("finish_reason"):
                        answer.finish = str(choice["finish_reason"])
                    text = (choice.get("delta") or {}).get("content") or ""
                    if not text:
                        continue
                    if answer.first_token is None:
                        answer.first_token = time.perf_counter()
                        yield Stage.at("answering")
                    answer.text.append(text)
                    answer.count += 1
                    progress = answering_progress(answer.count, sampling.max_new_tokens)
                    yield Token(text, answer.count, progress)

    async def _finish(
        self,
        request: AskRequest,
        conversation: Conversation,
        question: str,
        checked: list[image_checks.CheckedImage],
        answer: Answer,
        started: float,
    ) -> Done:
        text = "".join(answer.text)
        if request.history is None:
            turn = StoredTurn(question, text, [c.sha256 for c in checked])
            blobs = {c.sha256: c.data for c in checked}
            await self.conversations.append(conversation, turn, blobs)
        self.status.record_answer()
        timings = {"total": round(time.perf_counter() - started, 4)}
        if answer.first_token is not None:
            timings["ttft"] = round(answer.first_token - started, 4)
            self.metrics.ttft.observe(timings["ttft"])
        self.metrics.tokens.inc(answer.completion_tokens or answer.count)
        reason: Literal["stop", "length"] = "length" if answer.finish == "length" else "stop"
        return Done(
            answer=text,
            conversation_id=conversation.id,
            prompt_tokens=answer.prompt_tokens,
            completion_tokens=answer.completion_tokens or answer.count,
            images=len(checked),
            cache_hits=0,
            finish_reason=reason,
            timings=timings,
            images_seen=answer.images_seen,
        )

    def _saw_failure(self, exc: QwenUIError) -> None:
        if isinstance(exc, RemoteUnreachable | RemoteTimeout | BadGateway | GatewayTimeout):
            self.health.down(exc.code, time.time())
