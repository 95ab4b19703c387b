"""The principal's conversations in the page: the sidebar's list, and a stored
conversation drawn as chat messages (what a reload or opening one from the list shows).

The server's conversation is the truth: the page draws it from the store, with its images
written once to a temporary folder Gradio may serve (named by sha256, per tenant).
"""

from __future__ import annotations

import hashlib
import io
import tempfile
import time
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from PIL import Image

from qwen_ui.auth.principal import Principal
from qwen_ui.engine.conversations import Conversation, ConversationStore, Summary
from qwen_ui.engine.errors import ConversationNotFound
from qwen_ui.services import maybe_services
from qwen_ui.web.boxes_view import numbers_of
from qwen_ui.web.chat_boxes import turn_messages
from qwen_ui.web.i18n import Lang, t

Messages = list[dict[str, Any]]
IMAGE_DIR = Path(tempfile.gettempdir()) / "qwen-ui-conversations"


def store_of(app: FastAPI) -> ConversationStore | None:
    """The conversations of every model; None before the services started."""
    services = maybe_services(app)
    return None if services is None else services.conversations


async def choices(app: FastAPI, principal: Principal, lang: Lang) -> list[tuple[str, str]]:
    """(label, id) of the principal's conversations, the latest first."""
    store = store_of(app)
    if store is None:
        return []
    return [(label(item, lang), item.id) for item in await store.owned(principal.label)]


def label(item: Summary, lang: Lang) -> str:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(item.updated))
    images = t("n_images", lang).format(n=item.images) if item.images else ""
    title = item.title or t("untitled", lang)
    return " · ".join(part for part in (title, when, images) if part)


async def open_conversation(
    app: FastAPI, principal: Principal, conversation_id: str | None
) -> Conversation | None:
    """The principal's conversation, or None (none chosen, expired, or someone else's)."""
    store = store_of(app)
    if store is None or not conversation_id:
        return None
    try:
        return await store.get(principal.label, conversation_id)
    except ConversationNotFound:
        return None


async def messages(app: FastAPI, conversation: Conversation, lang: Lang) -> Messages:
    """The conversation as chat messages: each turn's images, question and answer (with the
    images it located things on, boxes drawn), then images attached since the last answer."""
    store = store_of(app)
    assert store is not None
    out: Messages = []
    number = 0
    numbers = numbers_of(conversation.images)
    for turn in conversation.turns:
        for sha in turn.images:
            number += 1
            path = await image_file(store, conversation.tenant, sha)
            out.append(image_message(str(path), number, lang))
        out.append({"role": "user", "content": escape_markdown_html(turn.question)})
        out += await turn_messages(store, conversation.tenant, turn, numbers, lang)
    for sha in conversation.pending:
        number += 1
        out.append(
            image_message(str(await image_file(store, conversation.tenant, sha)), number, lang)
        )
    return out


async def image_file(store: ConversationStore, tenant: str, sha: str) -> Path:
    folder = IMAGE_DIR / hashlib.sha256(tenant.encode()).hexdigest()[:16]
    found = list(folder.glob(f"{sha}.*")) if folder.exists() else []
    if found:
        return found[0]
    data = await store.image(tenant, sha)
    with Image.open(io.BytesIO(data)) as image:
        extension = (image.format or "png").lower()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{sha}.{extension}"
    path.write_bytes(data)
    return path


def image_message(path: str, number: int, lang: Lang, name: str | None = None) -> dict[str, Any]:
    """An image of the conversation, numbered as the stages number it."""
    alt = t("image_alt", lang).format(number=number, name=name or Path(path).name)
    return {"role": "user", "content": {"path": path, "alt_text": alt}}


def escape_markdown_html(text: str) -> str:
    """User text shown as Markdown but never as HTML (``<img src=x>`` stays text)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
