"""An HTTP client for one OpenAI-compatible model server (vLLM, SGLang, LMDeploy, Alibaba
Cloud Model Studio's compatible mode, or another qwen-ui): streamed chat completions as
parsed chunks, the model list, and the server's failures as typed errors.

- unreachable, reset or garbled: :class:`RemoteUnreachable` (502)
- an error status or an in-stream ``{"error": ...}``: :class:`RemoteRejected` (502), or
  :class:`RemoteBusy` (503 with Retry-After) for 429
- no byte within ``timeout_s`` (first byte, or between two chunks): :class:`RemoteTimeout`
  (504)

The API key goes only into the Authorization header; it is never logged or put in an
error. The remote's own message is cut to a few hundred characters.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import SecretStr

from qwen_ui.errors import BadGateway, GatewayTimeout, ServiceUnavailable

log = logging.getLogger(__name__)

MAX_DETAIL = 300
CONNECT_TIMEOUT_S = 10.0


class RemoteUnreachable(BadGateway):
    code = "remote_unreachable"
    en = "The model server cannot be reached ({reason}); try again shortly."
    zh = "无法连接模型服务器（{reason}），请稍后重试。"


class RemoteRejected(BadGateway):
    code = "remote_error"
    en = "The model server answered with an error (HTTP {status}): {detail}"
    zh = "模型服务器返回错误（HTTP {status}）：{detail}"


class RemoteTimeout(GatewayTimeout):
    code = "remote_timeout"
    en = "The model server did not answer within {seconds} s; try again."
    zh = "模型服务器在 {seconds} 秒内没有响应，请重试。"


class RemoteBusy(ServiceUnavailable):
    code = "remote_busy"
    en = "The model server is busy; retry in {seconds} s."
    zh = "模型服务器繁忙，请在 {seconds} 秒后重试。"


@dataclass
class RemoteHealth:
    """The remote's last known state, from the latest call or probe (never a probe of its
    own: /healthz reads it instantly)."""

    state: str = "unknown"  # "up" | "down" | "unknown"
    reason: str | None = None
    checked_at: float | None = None

    def up(self, now: float) -> None:
        self.state, self.reason, self.checked_at = "up", None, now

    def down(self, reason: str, now: float) -> None:
        self.state, self.reason, self.checked_at = "down", reason, now

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "reason": self.reason, "checked_at": self.checked_at}


class RemoteClient:
    def __init__(
        self,
        base_url: str,
        api_key: SecretStr | None,
        timeout_s: float,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Accept": "application/json"}
        if api_key is not None and api_key.get_secret_value():
            headers["Authorization"] = f"Bearer {api_key.get_secret_value()}"
        self.timeout_s = timeout_s
        self.http = httpx.AsyncClient(
            base_url=base_url.rstrip("/") + "/",
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, CONNECT_TIMEOUT_S)),
            transport=transport,
            follow_redirects=False,
        )

    async def aclose(self) -> None:
        await self.http.aclose()

    async def stream_chat(self, body: dict[str, Any]) -> AsyncGenerator[dict[str, Any], None]:
        """The chunks of one streamed completion; leaving early closes the connection
        (the remote sees the client go and stops generating)."""
        try:
            async with self.http.stream("POST", "chat/completions", json=body) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise error_for(response.status_code, response.text, response.headers)
                async for line in response.aiter_lines():
                    chunk = parse_sse_line(line)
                    if chunk is None:
                        continue
                    if chunk is DONE:
                        return
                    yield chunk
        except httpx.TimeoutException:
            raise RemoteTimeout(seconds=round(self.timeout_s)) from None
        except httpx.HTTPError as exc:
            raise RemoteUnreachable(reason=type(exc).__name__) from None

    async def models(self, timeout_s: float) -> list[str]:
        """The remote's model ids (GET /models), within ``timeout_s``."""
        try:
            response = await self.http.get("models", timeout=timeout_s)
        except httpx.TimeoutException:
            raise RemoteTimeout(seconds=round(timeout_s)) from None
        except httpx.HTTPError as exc:
            raise RemoteUnreachable(reason=type(exc).__name__) from None
        if response.status_code >= 400:
            raise error_for(response.status_code, response.text, response.headers)
        try:
            return [str(m["id"]) for m in response.json()["data"]]
        except (ValueError, KeyError, TypeError):
            raise RemoteRejected(status=response.status_code, detail="not a model list") from None


DONE: dict[str, Any] = {}


def parse_sse_line(line: str) -> dict[str, Any] | None:
    """One line of an SSE stream: a chunk, ``DONE``, or None (comments, ``event:``, blank
    lines). An ``{"error": ...}`` payload raises :class:`RemoteRejected`."""
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if payload == "[DONE]":
        return DONE
    try:
        chunk = json.loads(payload)
    except ValueError:
        raise RemoteRejected(status=200, detail="a stream line is not JSON") from None
    if not isinstance(chunk, dict):
        raise RemoteRejected(status=200, detail="a stream line is not an object")
    if "error" in chunk:
        raise RemoteRejected(status=200, detail=error_detail(chunk))
    return chunk


def error_detail(body: object) -> str:
    """The remote's error message (OpenAI's ``error.message``, Model Studio's ``message``
    and ``code``), cut short."""
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            parts = [str(error.get(k)) for k in ("code", "message") if error.get(k)]
            if parts:
                return ": ".join(parts)[:MAX_DETAIL]
        elif isinstance(error, str):
            return error[:MAX_DETAIL]
    return "no details"


def error_for(status: int, text: str, headers: httpx.Headers) -> Exception:
    try:
        detail = error_detail(json.loads(text))
    except ValueError:
        detail = text.strip()[:MAX_DETAIL] or "no details"
    if status == 429:
        retry = headers.get("retry-after", "")
        seconds = float(retry) if retry.replace(".", "", 1).isdigit() else 5.0
        return RemoteBusy(retry_after=seconds, seconds=round(seconds))
    log.warning("remote model server answered HTTP %d: %s", status, detail)
    return RemoteRejected(status=status, detail=detail)
