"""Browsing the tenant's OSS prefix over HTTP, with the session's own credentials.

``GET /api/v1/oss/objects?folder=&cursor=&size=`` lists one page (folders and objects,
names relative to the tenant prefix). ``GET /api/v1/oss/object?key=`` returns one
object's bytes (at most ``max_image_bytes``). Credentials that OSS no longer accepts
(an expired STS token, a disabled key) end the session: 401.
"""

from __future__ import annotations

import mimetypes

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from qwen_ui.auth.errors import SessionExpired
from qwen_ui.services import ServicesDep
from qwen_ui.web.auth import SessionDep

router = APIRouter(prefix="/api/v1/oss")


@router.get("/objects")
async def list_objects(
    services: ServicesDep,
    current: SessionDep,
    folder: str = "",
    cursor: str | None = None,
    size: int = 50,
) -> JSONResponse:
    session_id, session = current
    objects = services.auth.objects(session)
    try:
        page = await objects.list(folder, cursor, size)
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
