"""Browsing the tenant's OSS prefix over HTTP, with the session's own credentials.

``GET /api/v1/oss/objects?folder=&cursor=&size=`` lists one page (folders and objects,
names relative to the tenant prefix; ``size``: 1 to 100 entries, 50 by default, anything
else a 400 ``bad_option``). ``GET /api/v1/oss/object?key=`` returns one
object's bytes (at most ``max_image_bytes``). Credentials that OSS no longer accepts
(an expired STS token, a disabled key) end the session: 401.
"""

from __future__ import annotations

import mimetypes

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from qwen_ui.auth.errors import SessionExpired
from qwen_ui.auth.oss_objects import MAX_PAGE
from qwen_ui.services import ServicesDep
from qwen_ui.web.auth import SessionDep
from qwen_ui.web.options import integer_option

router = APIRouter(prefix="/api/v1/oss")
DEFAULT_PAGE = 50


@router.get("/objects")
async def list_objects(
    services: ServicesDep,
    current: SessionDep,
    folder: str = "",
    cursor: str | None = None,
    size: str | None = None,
) -> JSONResponse:
    page_size = integer_option("size", size, 1, MAX_PAGE) or DEFAULT_PAGE
    session_id, session = current
    objects = services.auth.objects(session)
    try:
        page = await objects.list(folder, cursor, page_size)
    except SessionExpired:
        await services.auth.sessions.delete(session_id)
        raise
    return JSONResponse(page.to_dict(), headers={"Cache-Control": "no-store"})


@router.get("/object")
async def get_object(services: ServicesDep, key: str, current: SessionDep) -> Response:
    session_id, session = current
    objects = services.auth.objects(session)
    try:
        data = await objects.fetch(key)
    except SessionExpired:
        await services.auth.sessions.delete(session_id)
        raise
    media = mimetypes.guess_type(key)[0] or "application/octet-stream"
    headers = {
        "Cache-Control": "private, no-store",
        "X-Content-Type-Options": "nosniff",
        "Content-Disposition": "attachment",
    }
    return Response(data, media_type=media, headers=headers)
