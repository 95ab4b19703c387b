"""The first thing every request meets (a pure ASGI middleware, before Starlette, FastAPI
or Gradio parse anything).

1. **Who**: outside the public paths (``/healthz``, ``/readyz``, ``/metrics``, ``/login``,
   ``/logout``) the caller is resolved from the headers alone; without credentials a
   browser page load is sent to ``/login?next=...`` and anything else gets 401, at once,
   with ``Connection: close``: not a byte of the body is read. The ``/admin/models``
   routes need the admin token instead, checked the same way and as early
   (:mod:`qwen_ui.web.admin_token`).
   Gradio's own routes (config, queue, heartbeat, cancel, reset, openapi, uploads,
   ``file=``) are behind this like every other path.
2. **From where**: a state-changing request authenticated by the session cookie must come
   from this site (:mod:`qwen_ui.web.origin`) or carry the session's ``X-CSRF-Token``.
3. **How much**: a ``Content-Length`` over ``max_request_bytes`` is a 413 before reading;
   the body itself is read through :class:`~qwen_ui.web.body.BodyReader` (size, read
   timeout, multipart closing boundary).
4. **Whose file**: ``file=`` serves only the caller's own files (:mod:`qwen_ui.uploads`);
   a post to Gradio's routes is read whole and refused when a value names a path that is
   not the caller's; the paths Gradio's upload route and event answers name are recorded
   for the caller (:mod:`qwen_ui.web.gradio_files`).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from urllib.parse import quote

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from qwen_ui.auth.errors import CsrfFailed
from qwen_ui.errors import MalformedBody, NotFound, QwenUIError, Unauthorized
from qwen_ui.settings import Settings
from qwen_ui.uploads import UploadRegistry
from qwen_ui.web import openai_wire
from qwen_ui.web.admin_token import ADMIN_PATHS, check_admin_token
from qwen_ui.web.body import (
    BodyReader,
    BodyRejected,
    declared_length,
    multipart_closing,
    too_large,
)
from qwen_ui.web.caller import Caller, CallerOf, CsrfCheck
from qwen_ui.web.gradio_files import (
    RecordingAnswer,
    check_values,
    names_files,
    read_whole,
    takes_values,
)
from qwen_ui.web.i18n import negotiate
from qwen_ui.web.origin import STATE_CHANGING, same_site_request

log = logging.getLogger(__name__)

PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/login", "/logout"})
FILE_ROUTE = re.compile(r"/(?:gradio_api/)?file[=/](?P<path>.+)$")
UPLOAD_ROUTE = re.compile(r"/gradio_api/upload/?$")
Uploads = Callable[[], UploadRegistry | None]


def local_path(scope: Scope) -> str:
    """The request path without the proxy's ``root_path`` prefix."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "") or ""
    return (path[len(root) :] or "/") if root and path.startswith(root) else path


class Reply:
    """The guard's side of one response: its own error answers, and the app's messages,
    dropped once the guard has answered."""

    def __init__(self, scope: Scope, send: Send, language: str) -> None:
        self.scope = scope
        self._send = send
        self.language = language
        self.started = False
        self.rejected = False

    async def send(self, message: Message) -> None:
        if self.rejected:
            return
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)

    async def error(self, error: QwenUIError) -> None:
        """Answer with ``error`` in the one error shape and close the connection (the rest
        of the body is never read); too late once the app began its response."""
        if self.rejected:
            return
        self.rejected = True
        if self.started:
            return
        headers = Headers(scope=self.scope)
        lang = negotiate(headers.get("accept-language"), self.language)
        extra = []
        if error.retry_after is not None:
            extra.append((b"retry-after", str(max(1, round(error.retry_after))).encode()))
        body = openai_wire.body_for(local_path(self.scope), error, lang)  # /v1/: OpenAI's
        await self._respond(error.status, json.dumps(body).encode(), extra)

    async def redirect(self, location: str) -> None:
        self.rejected = True
        await self._respond(303, b"", [(b"location", location.encode("latin-1"))])

    async def _respond(self, status: int, body: bytes, extra: list[tuple[bytes, bytes]]) -> None:
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"),
            (b"connection", b"close"),
            *extra,
        ]
        await self._send({"type": "http.response.start", "status": status, "headers": headers})
        await self._send({"type": "http.response.body", "body": body})


class RequestGuard:
    def __init__(
        self,
        app: ASGIApp,
        *,
        settings: Settings,
        caller_of: CallerOf,
        csrf_ok: CsrfCheck,
        uploads: Uploads,
    ) -> None:
        self.app = app
        self.caller_of = caller_of
        self.csrf_ok = csrf_ok
        self.uploads = uploads
        self.limit = settings.max_request_bytes
        self.timeout_s = settings.body_read_timeout_s
        self.allowed_origins = settings.cors_origin_list
        self.language = settings.language
        self.admin_token = settings.admin_token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            caller = await self.caller_of(scope)
        except QwenUIError:
            caller = None
        if caller is None:
            await send({"type": "websocket.close", "code": 1008})
            return
        await self.app(scope, receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        reply = Reply(scope, send, self.language)
        path = local_path(scope)
        try:
            caller = await self._who(scope, path, reply)
            if reply.rejected:
                return
            reader = self._body_reader(scope, receive, reply)
            body = await self._values_checked(scope, path, caller, reader)
            app_send = await self._answer_hook(scope, path, caller, reply.send)
        except BodyRejected as rejected:
            log.info("request refused while reading its body: %s", rejected.error.code)
            return
        except QwenUIError as error:
            await reply.error(error)
            return
        try:
            await self.app(scope, body, app_send)
        except BodyRejected as rejected:
            log.info("request refused while reading its body: %s", rejected.error.code)
        except Exception:
            if not reply.rejected:
                raise
            log.info("request ended after its body was refused")

    async def _who(self, scope: Scope, path: str, reply: Reply) -> Caller | None:
        """The caller; None for the public paths, and for the admin paths once the admin
        token is found in the headers (else :class:`AdminUnauthorized`, before the body)."""
        if path in ADMIN_PATHS:
            check_admin_token(Headers(scope=scope), self.admin_token)
            return None
        if path in PUBLIC_PATHS:
            return None
        return await self._admit(scope, path, reply)

    async def _admit(self, scope: Scope, path: str, reply: Reply) -> Caller | None:
        """The caller, or None after answering (login redirect, 401, 403, 404)."""
        caller = await self.caller_of(scope)
        headers = Headers(scope=scope)
        if caller is None:
            if scope["method"] in ("GET", "HEAD") and "text/html" in headers.get("accept", ""):
                await reply.redirect(_login_url(scope, path))
            else:
                await reply.error(Unauthorized())
            return None
        if scope["method"] in STATE_CHANGING and caller.by_cookie:
            token = headers.get("x-csrf-token", "")
            same_site = same_site_request(headers, self.allowed_origins, scope["scheme"])
            if not same_site and not self.csrf_ok(caller, token):
                await reply.error(CsrfFailed())
                return None
        await self._check_file(path, caller)
        return caller

    async def _check_file(self, path: str, caller: Caller) -> None:
        match = FILE_ROUTE.search(path)
        registry = self.uploads()
        if match is None or registry is None:
            return
        if not await registry.may_read(caller.principal, match.group("path")):
            raise NotFound()

    def _body_reader(self, scope: Scope, receive: Receive, reply: Reply) -> BodyReader:
        headers = Headers(scope=scope)
        length = declared_length(headers)
        if length is not None and length > self.limit:
            raise too_large(self.limit)
        closing = multipart_closing(headers)
        if closing is not None and length == 0:
            raise MalformedBody()
        return BodyReader(
            receive, reply.error, limit=self.limit, timeout_s=self.timeout_s, closing=closing
        )

    async def _values_checked(
        self, scope: Scope, path: str, caller: Caller | None, body: Receive
    ) -> Receive:
        """A post to Gradio's routes is read whole first: every path its values name must
        be the caller's (:mod:`qwen_ui.web.gradio_files`)."""
        registry = self.uploads()
        if caller is None or registry is None or not takes_values(scope["method"], path):
            return body
        raw, replay = await read_whole(body)
        await check_values(raw, registry, caller)
        return replay

    async def _answer_hook(
        self, scope: Scope, path: str, caller: Caller | None, send: Send
    ) -> Send:
        """Record as the caller's the files Gradio's answer names: the upload route's new
        uploads, and the files the events send (conversation images, OSS objects)."""
        registry = self.uploads()
        if caller is None or registry is None:
            return send
        if scope["method"] == "POST" and UPLOAD_ROUTE.search(path):
            return RecordingSend(send, registry, caller)
        if names_files(path):
            return RecordingAnswer(send, registry, caller)
        return send


class RecordingSend:
    """Holds back the upload route's answer (a short JSON list of paths) until the paths
    are recorded as the caller's."""

    def __init__(self, send: Send, registry: UploadRegistry, caller: Caller) -> None:
        self._send = send
        self.registry = registry
        self.caller = caller
        self._start: Message | None = None
        self._body = b""

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self._start = message
            return
        if message["type"] != "http.response.body" or self._start is None:
            await self._send(message)
            return
        self._body += message.get("body", b"")
        if message.get("more_body", False):
            return
        if self._start["status"] == 200:
            await self.registry.record(self.caller.principal, _paths(self._body))
        await self._send(self._start)
        await self._send({"type": "http.response.body", "body": self._body})


def _paths(body: bytes) -> list[str]:
    try:
        value = json.loads(body)
    except ValueError:
        return []
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _login_url(scope: Scope, path: str) -> str:
    query = scope.get("query_string", b"").decode("latin-1")
    target = path + (f"?{query}" if query else "")
    root = scope.get("root_path", "") or ""
    return f"{root}/login?next={quote(target, safe='/')}"
