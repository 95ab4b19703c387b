"""Who answers a batch row: the local engine, in this process, or a running server over
``POST /api/v1/ask`` (newline-delimited JSON events, an API token as bearer). Both turn
the last event into an :class:`Answered`; neither raises for a row's failure."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from qwen_ui.batch.errors import ServerRefusedToken, ServerUnreachable
from qwen_ui.engine.engine import AskOptions, AskRequest, Engine
from qwen_ui.engine.events import Done, Failed
from qwen_ui.errors import QwenUIError

BUSY = frozenset({429, 503})  # statuses worth a retry after the server's Retry-After
MAX_WAIT_S = 30.0


@dataclass(frozen=True)
class Answered:
    """A row's outcome: the answer (boxes as labels), its boxes and stage seconds, or the
    typed error ``{"code", "message", "status"}``."""

    answer: str | None = None
    boxes: list[dict[str, Any]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    error: dict[str, Any] | None = None

    @classmethod
    def failed(cls, error: QwenUIError, lang: str) -> Answered:
        return cls(error=error_dict(error, lang))


def error_dict(error: QwenUIError, lang: str) -> dict[str, Any]:
    return dict(error.to_dict(lang)["error"])


class Asker(Protocol):
    async def ask(self, question: str, images: Sequence[bytes]) -> Answered: ...


class LocalAsker:
    """The engine of this process (the configured model), as tenant ``tenant``."""

    def __init__(self, engine: Engine, options: AskOptions, lang: str, tenant: str) -> None:
        self.engine = engine
        self.options = options
        self.lang = lang
        self.tenant = tenant

    async def ask(self, question: str, images: Sequence[bytes]) -> Answered:
        request = AskRequest(
            tenant=self.tenant,
            question=question,
            images=list(images),
            options=self.options,
            lang=self.lang,
        )
        last = None
        async with aclosing(self.engine.ask(request)) as events:
            async for event in events:
                last = event
        if isinstance(last, Done):
            return Answered(last.answer_text or last.answer, last.boxes, dict(last.timings))
        if isinstance(last, Failed):
            return Answered(
                error={"code": last.code, "message": last.message, "status": last.status}
            )
        return Answered(error=error_dict(QwenUIError(), self.lang))


@dataclass(frozen=True)
class ServerOptions:
    url: str
    token: str
    lang: str = "en"
    max_new_tokens: int | None = None
    retries: int = 2
    timeout_s: float = 600.0


class ServerAsker:
    """A running qwen-ui server; busy answers (429, 503) are retried after the server's
    ``Retry-After`` (at most 30 s), ``retries`` times."""

    def __init__(self, options: ServerOptions, client: httpx.AsyncClient) -> None:
        self.options = options
        self.client = client

    @classmethod
    def client_for(cls, options: ServerOptions) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=options.url.rstrip("/"),
            headers={"Authorization": f"Bearer {options.token}"},
            timeout=httpx.Timeout(options.timeout_s, connect=10.0),
        )

    async def check_token(self) -> dict[str, Any]:
        """Who the token is (``/api/v1/me``: its tenant and, for an OSS tenant, where its
        objects are); raises before any row runs when the server is down or refuses the
        token."""
        try:
            response = await self.client.get("/api/v1/me")
        except httpx.HTTPError as exc:
            raise ServerUnreachable(url=self.options.url, reason=type(exc).__name__) from exc
        if response.status_code in (401, 403):
            raise ServerRefusedToken(url=self.options.url)
        try:
            me = response.json()
        except ValueError:
            me = None
        if response.status_code != 200 or not isinstance(me, dict):
            reason = f"HTTP {response.status_code} from /api/v1/me"
            raise ServerUnreachable(url=self.options.url, reason=reason)
        return me

    async def ask(self, question: str, images: Sequence[bytes]) -> Answered:
        answered, wait = await self._once(question, images)
        for _ in range(self.options.retries):
            if wait is None:
                break
            await asyncio.sleep(min(wait, MAX_WAIT_S))
            answered, wait = await self._once(question, images)
        return answered

    async def _once(self, question: str, images: Sequence[bytes]) -> tuple[Answered, float | None]:
        """The outcome, and the seconds to wait before a retry (None: final)."""
        form = {"question": question, "lang": self.options.lang}
        if self.options.max_new_tokens is not None:
            form["max_new_tokens"] = str(self.options.max_new_tokens)
        files = [("images", (f"image{i + 1}", data)) for i, data in enumerate(images)]
        try:
            async with self.client.stream(
                "POST", "/api/v1/ask", data=form, files=files or None
            ) as response:
                if response.status_code != 200:
                    return _http_error(response.status_code, await response.aread())
                last = None
                async for line in response.aiter_lines():
                    if line.strip():
                        last = json.loads(line)
        except (httpx.HTTPError, ValueError) as exc:
            unreachable = ServerUnreachable(url=self.options.url, reason=type(exc).__name__)
            return Answered.failed(unreachable, self.options.lang), 1.0
        return _final(last, self.options.lang)


def _http_error(status: int, body: bytes) -> tuple[Answered, float | None]:
    try:
        error = json.loads(body)["error"]
        assert isinstance(error, dict)
    except (ValueError, KeyError, TypeError, AssertionError):
        error = {"code": "http_error", "message": f"HTTP {status}", "status": status}
    return Answered(error=error), _wait(error)


def _final(last: Any, lang: str) -> tuple[Answered, float | None]:
    if isinstance(last, dict) and last.get("type") == "done":
        answer = last.get("answer_text") or last.get("answer")
        return Answered(answer, list(last.get("boxes", [])), dict(last.get("timings", {}))), None
    if isinstance(last, dict) and last.get("type") == "failed":
        error = {key: last.get(key) for key in ("code", "message", "status")}
        error["retry_after"] = last.get("retry_after")
        return Answered(error={k: v for k, v in error.items() if v is not None}), _wait(last)
    return Answered.failed(QwenUIError(), lang), None


def _wait(error: dict[str, Any]) -> float | None:
    """Seconds before a retry for a busy answer, else None."""
    if error.get("status") not in BUSY:
        return None
    retry = error.get("retry_after")
    return float(retry) if isinstance(retry, int | float) else 1.0
