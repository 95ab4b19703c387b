"""Image URLs of an OpenAI-style request, read into bytes.

- ``data:image/...;base64,...``: decoded here; the size limit is checked on the encoded
  length before decoding.
- ``oss://KEY``: an object under the tenant's prefix, read with the login session's own
  OSS credentials and validated exactly as the OSS panel does (an API token carries no
  OSS credentials: such a request gets ``no_object_storage``).
- ``http(s)://``: refused, unless the host is listed in ``openai_image_hosts``; then it is
  fetched without following redirects, at most ``max_image_bytes``.

Every image is then checked by the engine like an upload (format, pixels, EXIF).
"""

from __future__ import annotations

import base64
import binascii
from urllib.parse import urlsplit

import httpx
from fastapi import Request

from qwen_ui.auth.errors import NoObjectStorage, SessionExpired
from qwen_ui.auth.principal import Principal
from qwen_ui.engine.errors import ImageTooLarge
from qwen_ui.errors import BadRequest
from qwen_ui.services import Services
from qwen_ui.settings import Settings
from qwen_ui.web.auth import require_session

FETCH_TIMEOUT_S = 10.0
MB = 1024 * 1024


class ImageURLRefused(BadRequest):
    code = "image_url_refused"
    en = "Image {index}: {reason}"
    zh = "第 {index} 张图片：{reason}"


class ImageURLUnreadable(BadRequest):
    code = "image_url_unreadable"
    en = "Image {index} could not be fetched from its URL ({reason})."
    zh = "无法从 URL 获取第 {index} 张图片（{reason}）。"


async def read_image_urls(
    request: Request, services: Services, principal: Principal, urls: list[str]
) -> list[bytes]:
    return [await read_one(request, services, principal, url, i) for i, url in enumerate(urls, 1)]


async def read_one(
    request: Request, services: Services, principal: Principal, url: str, index: int
) -> bytes:
    settings = services.settings
    if url.startswith("data:"):
        return from_data_url(url, index, settings.max_image_bytes)
    if url.startswith("oss://"):
        return await from_oss(request, services, principal, url.removeprefix("oss://"))
    scheme = urlsplit(url).scheme
    if scheme in ("http", "https"):
        return await from_http(url, index, settings)
    raise ImageURLRefused(index=index, reason="use a data: URL or oss://KEY")


def from_data_url(url: str, index: int, max_bytes: int) -> bytes:
    header, sep, payload = url.partition(",")
    if not sep or not header.endswith(";base64") or not header.startswith("data:image/"):
        raise ImageURLRefused(index=index, reason="a data URL must be data:image/...;base64,...")
    if len(payload) * 3 // 4 > max_bytes + 2:
        raise _too_large(index, len(payload) * 3 // 4, max_bytes)
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ImageURLRefused(index=index, reason="the data URL is not valid base64") from None
    if len(data) > max_bytes:
        raise _too_large(index, len(data), max_bytes)
    return data


async def from_oss(request: Request, services: Services, principal: Principal, key: str) -> bytes:
    if principal.method == "token":
        raise NoObjectStorage()
    session_id, session = await require_session(request, services)
    try:
        return await services.auth.objects(session).fetch(key)
    except SessionExpired:
        await services.auth.sessions.delete(session_id)
        raise


def allowed_hosts(settings: Settings) -> set[str]:
    return {h.strip().lower() for h in settings.openai_image_hosts.split(",") if h.strip()}


async def from_http(url: str, index: int, settings: Settings) -> bytes:
    host = (urlsplit(url).hostname or "").lower()
    if host not in allowed_hosts(settings):
        raise ImageURLRefused(
            index=index, reason="http(s) image URLs are not fetched here; send a data: URL"
        )
    limit = settings.max_image_bytes
    try:
        async with (
            httpx.AsyncClient(timeout=FETCH_TIMEOUT_S, follow_redirects=False) as client,
            client.stream("GET", url) as response,
        ):
            if response.status_code != 200:
                raise ImageURLUnreadable(index=index, reason=f"HTTP {response.status_code}")
            data = bytearray()
            async for chunk in response.aiter_bytes():
                data += chunk
                if len(data) > limit:
                    raise _too_large(index, len(data), limit)
            return bytes(data)
    except httpx.HTTPError as exc:
        raise ImageURLUnreadable(index=index, reason=type(exc).__name__) from None


def _too_large(index: int, size: int, limit: int) -> ImageTooLarge:
    return ImageTooLarge(index=index, size_mb=f"{size / MB:.1f}", limit_mb=f"{limit / MB:.1f}")
