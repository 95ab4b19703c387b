"""Reading a request body under the rules of :class:`~qwen_ui.web.guard.RequestGuard`.

:class:`BodyReader` wraps an ASGI ``receive``: each piece of the body must arrive within
``body_read_timeout_s`` (else 408), the body may not outgrow ``max_request_bytes`` (413,
whatever ``Content-Length`` claimed, chunked bodies included), and a multipart body must
end with its closing boundary, ``CRLF--BOUNDARY--`` followed by nothing but whitespace
(else 400 ``malformed_body``). The delimiter found anywhere else (inside an image's bytes)
does not count: the multipart parsers do not check that the last part ended, so a
cut-off part would be dropped silently.
On a violation the error response is sent at once through ``reject`` and
:class:`BodyRejected` is raised into the app, which stops parsing and deletes the
temporary files it spooled; whatever the app answers after that is dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from starlette.datastructures import Headers
from starlette.formparsers import MultiPartException
from starlette.types import Message, Receive

from qwen_ui.errors import MalformedBody, QwenUIError, RequestTimeout, RequestTooLarge

Reject = Callable[[QwenUIError], Awaitable[None]]
MiB = 1024 * 1024
WHITESPACE = b" \t\r\n"  # what may follow the closing boundary


class BodyRejected(MultiPartException):
    """Raised into the app after the guard answered the request with ``error``. A
    ``MultiPartException``, so that Starlette's and Gradio's multipart parsers delete the
    files they spooled so far (they clean up on that exception only)."""

    def __init__(self, error: QwenUIError) -> None:
        super().__init__(error.code)
        self.error = error


def too_large(limit: int) -> RequestTooLarge:
    return RequestTooLarge(limit_mb=f"{limit / MiB:.1f}")


def declared_length(headers: Headers) -> int | None:
    """``Content-Length`` as a number; None when absent (chunked) or unreadable."""
    value = headers.get("content-length")
    if value is None or not value.strip().isdigit():
        return None
    return int(value)


def multipart_closing(headers: Headers) -> bytes | None:
    """The closing delimiter (``--BOUNDARY--``) of a multipart body, None for other bodies.
    A multipart body without a boundary parameter is malformed from the start."""
    kind, _, params = headers.get("content-type", "").partition(";")
    if kind.strip().lower() != "multipart/form-data":
        return None
    for param in params.split(";"):
        name, _, value = param.strip().partition("=")
        if name.strip().lower() == "boundary" and value.strip('"'):
            return b"--" + value.strip('"').encode("latin-1") + b"--"
    raise MalformedBody()


class BodyEnd:
    """Whether a body seen piece by piece ends with ``closing`` (``--BOUNDARY--``) on a line
    of its own (or is that delimiter alone), followed by nothing but whitespace. Keeps only
    the last bytes before the trailing whitespace and the last of that whitespace."""

    def __init__(self, closing: bytes) -> None:
        self.closing = closing
        self._keep = len(closing) + 2  # CRLF--BOUNDARY--
        self._last = b""  # the body's last bytes up to its last non-whitespace byte
        self._blank = b""  # the whitespace after them (its last bytes)

    def take(self, chunk: bytes) -> None:
        text = chunk.rstrip(WHITESPACE)
        if text:
            self._last = (self._last + self._blank + text)[-self._keep :]
            self._blank = chunk[len(text) :][-self._keep :]
        else:
            self._blank = (self._blank + chunk)[-self._keep :]

    @property
    def closed(self) -> bool:
        return self._last == self.closing or self._last == b"\r\n" + self.closing


class BodyReader:
    """The guarded ``receive`` of one request."""

    def __init__(
        self,
        receive: Receive,
        reject: Reject,
        *,
        limit: int,
        timeout_s: float,
        closing: bytes | None,
    ) -> None:
        self._receive = receive
        self._reject = reject
        self.limit = limit
        self.timeout_s = timeout_s
        self.closing = closing
        self.size = 0
        self.complete = False
        self._end = BodyEnd(closing) if closing is not None else None

    async def __call__(self) -> Message:
        if self.complete:  # the body is in: what is left is waiting for a disconnect
            return await self._receive()
        try:
            message = await asyncio.wait_for(self._receive(), self.timeout_s)
        except TimeoutError:
            await self._fail(RequestTimeout(seconds=f"{self.timeout_s:g}"))
        if message["type"] != "http.request":
            self.complete = True
            return message
        await self._take(message.get("body", b""), bool(message.get("more_body", False)))
        return message

    async def _take(self, chunk: bytes, more: bool) -> None:
        self.size += len(chunk)
        if self.size > self.limit:
            await self._fail(too_large(self.limit))
        if self._end is not None:
            self._end.take(chunk)
        if not more:
            self.complete = True
            if self._end is not None and not self._end.closed:
                await self._fail(MalformedBody())

    async def _fail(self, error: QwenUIError) -> None:
        self.complete = True
        await self._reject(error)
        raise BodyRejected(error)
