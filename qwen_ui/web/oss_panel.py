"""The OSS images panel of the Gradio UI: browse the tenant's prefix page by page and
attach objects to the question, fetched with the session's own credentials.

Call :func:`build_oss_panel` inside the ``gr.Blocks`` context, after the question box::

    build_oss_panel(app, blocks, question)

The panel shows only for sessions that logged in with OSS keys. Attached objects are
written to a private temporary folder (Gradio then copies them to its cache, as it does
uploads) and appended to the ``MultimodalTextbox`` value; size limits are the upload
limits, and every key is validated before it reaches OSS.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

import gradio as gr
from fastapi import FastAPI

from qwen_ui.auth.errors import SessionExpired
from qwen_ui.auth.oss_objects import ObjectPage
from qwen_ui.errors import QwenUIError
from qwen_ui.services import services_of
from qwen_ui.web.auth import session_from_gradio
from qwen_ui.web.i18n import Lang, negotiate, t

log = logging.getLogger(__name__)

PAGE_SIZE = 50
STALE_S = 3600
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def _lang(request: gr.Request) -> Lang:
    return negotiate(request.headers.get("accept-language"))


def _tr(key: str, lang: Lang) -> str:
    return t(f"oss_{key}", lang)


def _upload_dir() -> Path:
    folder = Path(tempfile.gettempdir()) / "qwen-ui-oss"
    folder.mkdir(mode=0o700, exist_ok=True)
    now = time.time()
    for old in folder.glob("*/*"):
        if now - old.stat().st_mtime > STALE_S:
            old.unlink(missing_ok=True)
    return folder


def _write(data: bytes, key: str) -> str:
    name = _SAFE_NAME.sub("_", key.rsplit("/", 1)[-1])[-100:] or "object"
    folder = _upload_dir() / secrets.token_hex(8)
    folder.mkdir(mode=0o700)
    path = folder / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return str(path)


def _choices(page: ObjectPage) -> list[tuple[str, str]]:
    return [(f"{item.name} ({item.size:,} B)", item.key) for item in page.objects]


def _note(page: ObjectPage, lang: Lang) -> str:
    lines = []
    if page.folders:
        lines.append(f"**{_tr('folders', lang)}:** " + ", ".join(f"`{f}`" for f in page.folders))
    if not page.objects:
        lines.append(_tr("empty", lang))
    return "\n\n".join(lines)


async def _call(app: FastAPI, request: gr.Request, work: Any) -> Any:
    """Run ``work(objects)`` for the request's session; typed errors become toasts."""
    lang = _lang(request)
    try:
        session_id, session = await session_from_gradio(app, request)
        objects = services_of(app).auth.objects(session)
        try:
            return await work(objects)
        except SessionExpired:
            await services_of(app).auth.sessions.delete(session_id)
            raise
    except QwenUIError as error:
        raise gr.Error(error.message(lang)) from None


async def panel_visible(app: FastAPI, request: gr.Request) -> bool:
    """Whether this session has OSS credentials to browse with."""
    try:
        _session_id, session = await session_from_gradio(app, request)
    except QwenUIError:
        return False
    return session.oss is not None


async def list_page(
    app: FastAPI, folder: str, cursor: str | None, request: gr.Request
) -> tuple[ObjectPage, str]:
    """One page of the folder and a Markdown note (sub-folders, or 'empty')."""
    page: ObjectPage = await _call(
        app, request, lambda objects: objects.list(folder, cursor, PAGE_SIZE)
    )
    return page, _note(page, _lang(request))


async def attach(
    app: FastAPI, keys: list[str], message: dict[str, Any] | None, request: gr.Request
) -> dict[str, Any]:
    """The question box's value with the chosen objects appended (up to max_images)."""
    limit = services_of(app).settings.max_images
    value = dict(message or {"text": "", "files": []})
    files = list(value.get("files") or [])
    for key in keys[: max(0, limit - len(files))]:
        data: bytes = await _call(app, request, lambda objects, key=key: objects.fetch(key))
        files.append(_write(data, key))
    value["files"] = files
    return value


def build_oss_panel(app: FastAPI, blocks: gr.Blocks, question: gr.MultimodalTextbox) -> None:
    with gr.Accordion(_tr("panel", "en"), open=False, visible=False, elem_id="qwen-oss") as panel:
        cursor = gr.State(None)
        with gr.Row():
            folder = gr.Textbox(
                label=_tr("folder", "en"), value="", scale=3, elem_id="qwen-oss-folder"
            )
            open_button = gr.Button(_tr("open", "en"), scale=0, elem_id="qwen-oss-open")
            more = gr.Button(_tr("more", "en"), scale=0, interactive=False, elem_id="qwen-oss-more")
        listing = gr.CheckboxGroup(choices=[], label=_tr("objects", "en"), elem_id="qwen-oss-list")
        note = gr.Markdown()
        attach_button = gr.Button(
            _tr("attach", "en"), variant="secondary", elem_id="qwen-oss-attach"
        )

    async def on_load(request: gr.Request) -> Any:
        visible = await panel_visible(app, request)
        return gr.update(visible=visible, label=_tr("panel", _lang(request)))

    async def on_page(folder_name: str, token: str | None, request: gr.Request) -> dict[Any, Any]:
        page, text = await list_page(app, folder_name, token, request)
        return {
            listing: gr.update(choices=_choices(page), value=[]),
            cursor: page.next_cursor,
            more: gr.update(interactive=page.next_cursor is not None),
            note: text,
        }

    async def on_open(folder_name: str, request: gr.Request) -> dict[Any, Any]:
        return await on_page(folder_name, None, request)

    async def on_attach(
        keys: list[str], message: dict[str, Any] | None, request: gr.Request
    ) -> Any:
        return await attach(app, keys, message, request)

    outputs = [listing, cursor, more, note]
    blocks.load(on_load, None, panel, api_visibility="private")
    open_button.click(on_open, folder, outputs, api_visibility="private")
    folder.submit(on_open, folder, outputs, api_visibility="private")
    more.click(on_page, [folder, cursor], outputs, api_visibility="private")
    attach_button.click(on_attach, [listing, question], question, api_visibility="private")
