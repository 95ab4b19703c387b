"""``GET /api/v1/conversations/{id}/export?format=zip|json``: a conversation of the caller's
own, exported (:mod:`qwen_ui.web.export`). The caller is a login session (the page's
export links) or an API token; a conversation of anyone else, the same tenant's other
users included, is 404 ``conversation_not_found``, as for the rest of the conversation
routes. ``lang`` (``en``/``zh``, else the request's language) sets the Markdown's words.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import Response

from qwen_ui.errors import NotStarted
from qwen_ui.web.auth import PrincipalDep
from qwen_ui.web.errors import request_lang
from qwen_ui.web.export import gather_images, json_bytes, zip_bytes
from qwen_ui.web.history import store_of
from qwen_ui.web.options import BadChoice, ask_lang

router = APIRouter(prefix="/api/v1/conversations")
MEDIA = {"zip": "application/zip", "json": "application/json"}
FORMATS = tuple(MEDIA)


@router.get("/{conversation_id}/export")
async def export(
    request: Request,
    principal: PrincipalDep,
    conversation_id: str,
    format: str = "zip",
    lang: str | None = None,
) -> Response:
    if format not in FORMATS:
        raise BadChoice(name="format", choices=", ".join(FORMATS))
    chosen = request_lang(request, ask_lang(lang))
    store = store_of(request.app)
    if store is None:
        raise NotStarted()
    conversation = await store.get(principal.label, conversation_id)
    images = await gather_images(store, conversation)
    if format == "zip":  # drawing the boxes and deflating run off the event loop
        body = await asyncio.to_thread(zip_bytes, conversation, images, chosen)
    else:
        body = await asyncio.to_thread(json_bytes, conversation, images)
    name = f"qwen-ui-{conversation.id[:12]}.{format}"
    headers = {
        "Content-Disposition": f'attachment; filename="{name}"',
        "Cache-Control": "no-store",
    }
    return Response(body, media_type=MEDIA[format], headers=headers)
