"""A small fake of Alibaba Cloud Model Studio's OpenAI-compatible mode
(``https://dashscope.aliyuncs.com/compatible-mode/v1``), written from its public
documentation, as an ``httpx.MockTransport`` handler: the response shapes our remote
client must handle.

- ``POST /chat/completions`` with ``stream: true``: SSE ``data:`` lines of
  ``chat.completion.chunk`` objects (first delta carries ``role`` and empty content,
  ``usage: null`` on every content chunk, a last content chunk with ``finish_reason``
  and empty content, then with ``stream_options.include_usage`` a chunk with empty
  ``choices`` and the usage), ending ``data: [DONE]``.
- errors: ``{"error": {"code", "message", "param", "type"}, "request_id": ...}`` with
  401 ``invalid_api_key``, 400 ``invalid_parameter_error``, 429 ``limit_requests``; an
  error inside a stream as a ``data: {"error": ...}`` line.
- ``GET /models``: ``{"object": "list", "data": [{"id": ..., "object": "model"}]}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx

KEY = "sk-test-0123456789abcdef"
MODEL = "qwen-vl-max"


@dataclass
class ModelStudioFake:
    """Behaviour switches: ``mode`` is "ok", "bad_request", "throttled", "mid_stream_error"
    or "timeout"; every request body received is kept in ``bodies``."""

    answer: list[str] = field(default_factory=lambda: ["There are ", "3", " circles."])
    mode: str = "ok"
    bodies: list[dict[str, Any]] = field(default_factory=list)
    closed: list[bool] = field(default_factory=list)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.headers.get("authorization") != f"Bearer {KEY}":
            return error(401, "invalid_api_key", "Incorrect API key provided. ")
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"object": "list", "data": [model_entry()]})
        if self.mode == "timeout":
            raise httpx.ReadTimeout("read timed out", request=request)
        body = json.loads(request.content)
        self.bodies.append(body)
        if self.mode == "bad_request":
            return error(
                400, "invalid_parameter_error", "<400> InternalError.Algo.InvalidParameter"
            )
        if self.mode == "throttled":
            return error(429, "limit_requests", "You exceeded your current requests list.")
        return httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            stream=Lines(self.lines(body), self.closed),
        )

    def lines(self, body: dict[str, Any]) -> list[bytes]:
        chunks = [chunk({"content": "", "role": "assistant"})]
        chunks += [chunk({"content": part}) for part in self.answer]
        if self.mode == "mid_stream_error":
            err = {"error": {"code": "data_inspection_failed", "message": "Output inspection"}}
            return [sse(c) for c in chunks[:2]] + [sse(err)]
        chunks.append(chunk({"content": ""}, finish="stop"))
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": 1234, "completion_tokens": 5, "total_tokens": 1239}
            chunks.append({**chunk({}), "choices": [], "usage": usage})
        return [sse(c) for c in chunks] + [b"data: [DONE]\n\n"]


class Lines(httpx.AsyncByteStream):
    """The SSE body; records whether the client closed it."""

    def __init__(self, lines: list[bytes], closed: list[bool]) -> None:
        self.lines = lines
        self.closed = closed

    async def __aiter__(self):  # type: ignore[no-untyped-def]
        for line in self.lines:
            yield line

    async def aclose(self) -> None:
        self.closed.append(True)


def model_entry() -> dict[str, Any]:
    return {"id": MODEL, "object": "model", "created": 1700000000, "owned_by": "system"}


def chunk(delta: dict[str, str], finish: str | None = None) -> dict[str, Any]:
    return {
        "choices": [{"delta": delta, "finish_reason": finish, "index": 0, "logprobs": None}],
        "object": "chat.completion.chunk",
        "usage": None,
        "created": 1735000000,
        "system_fingerprint": None,
        "model": MODEL,
        "id": "chatcmpl-5d2f3c8e-0000-0000-0000-000000000000",
    }


def sse(body: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n".encode()


def error(status: int, code: str, message: str) -> httpx.Response:
    body = {
        "error": {"code": code, "message": message, "param": None, "type": code},
        "request_id": "0b6e4d1c-0000-0000-0000-000000000000",
    }
    return httpx.Response(status, json=body)
