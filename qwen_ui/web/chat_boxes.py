"""Boxes in the chat: an answer that located things shows its labels, not the model's JSON
("red circle (image 1)"), and each image it located something on, with a labelled
rectangle per box (one colour per label). Chatbot image messages carry Gradio's own
download button, so the annotated image is one click away.

"Show boxes" hides and shows the rectangles everywhere in the chat: every located image is
written twice, with and without its boxes (``<sha>-boxes-<digest>.png`` and
``<sha>-plain-<digest>.png``), and the switch swaps one path for the other.

The boxes come from the conversation (:mod:`qwen_ui.web.turn_record`), so the live answer,
a reload and a conversation opened from the list draw the same thing.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from qwen_ui.engine.annotate import RGB, annotate
from qwen_ui.engine.boxes import RawBox, labels_text
from qwen_ui.engine.conversations import Conversation, ConversationStore, StoredTurn
from qwen_ui.engine.errors import ConversationNotFound
from qwen_ui.web.boxes_view import (
    Boxes,
    annotated_png,
    colours_of,
    images_with_boxes,
    legend,
    numbers_of,
    on_image,
)
from qwen_ui.web.i18n import Lang, t

Messages = list[dict[str, Any]]
SHOWN, HIDDEN = "-boxes-", "-plain-"
BOX_DIR = Path(tempfile.gettempdir()) / "qwen-ui-boxes"  # a folder per tenant inside
DRAWING = "2"  # part of a drawn file's name: change it when the drawing itself changes


def tenant_folder(tenant: str) -> Path:
    return BOX_DIR / hashlib.sha256(tenant.encode()).hexdigest()[:16]


def shown_text(turn: StoredTurn, numbers: Mapping[str, int], lang: Lang) -> str:
    """The answer as the chat shows it: the labels with their images' numbers in place of
    an answer that was nothing but boxes, else the answer (boxes as labels) and that list."""
    text = turn.shown_answer
    if not turn.boxes:
        return text
    located = legend(turn.boxes, numbers, lang)
    only_boxes = labels_text([RawBox(str(b["label"]), (0, 0, 0, 0)) for b in turn.boxes])
    if text.strip() == only_boxes:
        return located
    return f"{text}\n\n📍 {located}"


async def turn_messages(
    store: ConversationStore, tenant: str, turn: StoredTurn, numbers: Mapping[str, int], lang: Lang
) -> Messages:
    """A turn's answer as chat messages: its text, then its located images."""
    messages: Messages = [{"role": "assistant", "content": shown_text(turn, numbers, lang)}]
    return messages + await located_images(store, tenant, turn.boxes, numbers, lang)


async def located_images(
    store: ConversationStore, tenant: str, boxes: Boxes, numbers: Mapping[str, int], lang: Lang
) -> Messages:
    """One image message per image with boxes, the boxes drawn."""
    colours = colours_of(boxes)
    out: Messages = []
    for sha in images_with_boxes(boxes):
        mine = on_image(boxes, sha)
        try:
            path = await drawn_file(store, tenant, sha, mine, colours)
        except ConversationNotFound:
            continue  # the image expired from the store: the labels in the text remain
        labels = legend(mine, {}, lang)
        alt = t("located_alt", lang).format(number=numbers.get(sha, 0), labels=labels)
        out.append({"role": "assistant", "content": {"path": str(path), "alt_text": alt}})
    return out


async def drawn_file(
    store: ConversationStore, tenant: str, sha: str, boxes: Boxes, colours: Mapping[str, RGB]
) -> Path:
    """The image with ``boxes`` drawn (written once, beside its copy without them)."""
    folder = tenant_folder(tenant)
    key = json.dumps([DRAWING, list(map(dict, boxes)), sorted(colours.items())], sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    drawn = folder / f"{sha}{SHOWN}{digest}.png"
    if not drawn.exists():
        data = await store.image(tenant, sha)
        await asyncio.to_thread(_write_both, data, boxes, colours, drawn)
    return drawn


def _write_both(data: bytes, boxes: Boxes, colours: Mapping[str, RGB], drawn: Path) -> None:
    drawn.parent.mkdir(parents=True, exist_ok=True)
    with Image.open(io.BytesIO(data)) as image:
        annotate(image, [], colours).save(_swapped(drawn, False), "PNG")  # upright, no box
    drawn.write_bytes(annotated_png(data, boxes, colours))


def _swapped(path: Path, show: bool) -> Path:
    old, new = (HIDDEN, SHOWN) if show else (SHOWN, HIDDEN)
    return path.with_name(path.name.replace(old, new, 1))


def with_boxes_shown(chat: Messages, show: bool, tenant: str) -> Messages:
    """The chat (messages as :func:`qwen_ui.web.chat.normalize` gives them) with every located
    image shown with or without its boxes. Only the file's name is read from the chat (the
    browser sends it back, from Gradio's cache): the swapped copy is looked up in the
    tenant's own folder."""
    folder = tenant_folder(tenant)
    out: Messages = []
    for message in chat:
        content = message.get("content")
        if isinstance(content, dict) and message.get("role") == "assistant":
            name = Path(str(content.get("path", ""))).name
            swapped = _swapped(folder / name, show)
            if (SHOWN in name or HIDDEN in name) and swapped.is_file():
                message = {**message, "content": {**content, "path": str(swapped)}}
        out.append(message)
    return out


async def draw_last_answer(
    store: ConversationStore, conversation: Conversation, chat: Messages, lang: Lang, show: bool
) -> Messages | None:
    """The chat with its last answer drawn from the conversation's last turn (labels in the
    text, the located images after it); None when there is nothing to change: no boxes, the
    last reply is not that turn's answer, or it is drawn already."""
    if not conversation.turns or not conversation.turns[-1].boxes:
        return None
    turn = conversation.turns[-1]
    at = _last_reply(chat)
    if at is None or not str(chat[at]["content"]).startswith(turn.shown_answer):
        return None
    if at + 1 < len(chat) and isinstance(chat[at + 1].get("content"), dict):
        return None  # drawn already
    numbers = numbers_of(conversation.images)
    drawn = await turn_messages(store, conversation.tenant, turn, numbers, lang)
    tail = str(chat[at]["content"])[len(turn.shown_answer) :]  # e.g. "no image was used"
    drawn[0]["content"] += tail
    return with_boxes_shown([*chat[:at], *drawn, *chat[at + 1 :]], show, conversation.tenant)


def _last_reply(chat: Sequence[dict[str, Any]]) -> int | None:
    for index in range(len(chat) - 1, -1, -1):
        message = chat[index]
        if message.get("role") == "assistant" and not message.get("metadata"):
            return index if isinstance(message.get("content"), str) else None
    return None
