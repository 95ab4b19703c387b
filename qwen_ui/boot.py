"""Start fast: answer ``/healthz`` from the first instant while the full app is built.

Importing Gradio alone takes seconds on a small machine, and the load balancer must see
a live process within 2 s of its start. :class:`DeferredApp` is the ASGI app that
``qwen-ui serve`` hands to uvicorn: it finishes lifespan start-up at once, builds the real
app (``create_app``) in a worker thread, enters that app's own lifespan, then forwards
every request to it. Until then ``/healthz`` answers from the settings alone and every
other path gets a 503 "starting" with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from qwen_ui import __version__
from qwen_ui.errors import NotStarted
from qwen_ui.settings import Settings

log = logging.getLogger(__name__)


class DeferredApp:
    """An ASGI app that becomes ``build()``'s app once that is ready."""

    def __init__(self, settings: Settings, build: Callable[[], Any]) -> None:
        self.settings = settings
        self._build = build
        self._app: ASGIApp | None = None
        self._error: str | None = None
        self._stack = contextlib.AsyncExitStack()
        self._task: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif self._app is not None:
            await self._app(scope, receive, send)
        elif scope["type"] == "http":
            await self._booting(scope, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        self._task = asyncio.create_task(self._start())
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        if self._task is not None and not self._task.done():
            self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        await self._stack.aclose()
        await send({"type": "lifespan.shutdown.complete"})

    async def _start(self) -> None:
        try:
            app = await asyncio.to_thread(self._build)
            await self._stack.enter_async_context(app.router.lifespan_context(app))
        except Exception as exc:
            self._error = f"{type(exc).__name__}: {exc}"
            log.exception("qwen-ui failed to start")
            return
        self._app = app
        log.info("qwen-ui ready on http://%s:%s", self.settings.host, self.settings.port)

    async def _booting(self, scope: Scope, send: Send) -> None:
        if scope["path"] == "/healthz":
            failed = self._error is not None
            body: dict[str, Any] = {
                "status": "failed" if failed else "ok",
                "version": __version__,
                "model": self.settings.model_id,
                "revision": self.settings.model_revision,
                "engine": "failed" if failed else "idle",
            }
            if failed:
                body["reason"] = self._error
            await _json(send, 503 if failed else 200, body)
            return
        await _json(send, 503, NotStarted().to_dict("en"), retry_after=1)


async def _json(send: Send, status: int, body: dict[str, Any], retry_after: int = 0) -> None:
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(payload))]
    if retry_after:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
