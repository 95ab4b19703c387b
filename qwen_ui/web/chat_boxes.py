"""Boxes in the chat: an answer that located things shows its labels, not the model's JSON
("red circle (image 1)"), and each image it located something on, with a labelled
rectangle per box (one colour per label). Chatbot image messages carry Gradio's own
download button, so the annotated image is one click away.

"Show boxes" hides and shows the rectangles everywhere in the chat: every located image is
written twice, with and without its boxes (``<sha>-boxes-<digest>.png`` and
``<sha>-plain-<digest>.png``), and the switch swaps one path for the other.

Each pair is drawn from one decode of the stored image (the upright picture is saved, then
the boxes are drawn on it), counted against the app's decode budget
(:func:`qwen_ui.web.boxes_view.counted`). A drawing the budget refuses, or waits too long
for, is left out like an image that expired from the store: the answer's text and labels
remain.

The boxes come from the conversation (:mod:`qwen_ui.web.turn_record`), so the live answer,
a reload and a conversation opened from the list draw the same thing.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from PIL import Image

from qwen_ui.engine.annotate import RGB, draw, upright
from qwen_ui.engine.boxes import RawBox, labels_text
from qwen_ui.engine.conversations import Conversation, ConversationStore, StoredTurn
from qwen_ui.engine.decoding import DecodeBudget
from qwen_ui.engine.errors import ConversationNotFound, DecodeBusy, ImageDecodeBudget
from qwen_ui.web.boxes_view import (
    Boxes,
    as_boxes,
    colours_of,
    counted,
    images_with_boxes,
    legend,
    numbers_of,
    on_image,
    png_bytes,
)
from qwen_ui.web.i18n import Lang, t

log = logging.getLogger(__name__)

Messages = list[dict[str, Any]]
SHOWN, HIDDEN = "-boxes-", "-plain-"
BOX_DIR = Path(tempfile.gettempdir()) / "qwen-ui-boxes"  # a folder per tenant inside
DRAWING = "2"  # part of a drawn file's name: change it when the drawing itself changes


@dataclass(frozen=True)
class Drawing:
    """What drawing located images takes: the store their files come from, and the app's
    decode budget each drawing is counted against."""

    store: ConversationStore
    budget: DecodeBudget


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
    drawing: Drawing, tenant: str, turn: StoredTurn, numbers: Mapping[str, int], lang: Lang
) -> Messages:
    """A turn's answer as chat messages: its text, then its located images."""
    messages: Messages = [{"role": "assistant", "content": shown_text(turn, numbers, lang)}]
    return messages + await located_images(drawing, tenant, turn.boxes, numbers, lang)


async def located_images(
    drawing: Drawing, tenant: str, boxes: Boxes, numbers: Mapping[str, int], lang: Lang
) -> Messages:
    """One image message per image with boxes, the boxes drawn (an image that expired, or
    whose drawing the decode budget refused or timed out, is left out)."""
    colours = colours_of(boxes)
    out: Messages = []
    for sha in images_with_boxes(boxes):
        mine, number = on_image(boxes, sha), numbers.get(sha, 0)
        try:
            path = await drawn_file(drawing, tenant, sha, mine, colours, number)
        except ConversationNotFound:
            continue  # the image expired from the store: the labels in the text remain
        except (ImageDecodeBudget, DecodeBusy) as exc:
            log.info("located image %d not drawn: %s", number, exc.code)
            continue
        labels = legend(mine, {}, lang)
        alt = t("located_alt", lang).format(number=number, labels=labels)
        out.append({"role": "assistant", "content": {"path": str(path), "alt_text": alt}})
    return out


async def drawn_file(
    drawing: Drawing,
    tenant: str,
    sha: str,
    boxes: Boxes,
    colours: Mapping[str, RGB],
    number: int,
) -> Path:
    """The image with ``boxes`` drawn (written once, beside its copy without them, while
    the drawing's cost is held in the decode budget; ``number``: the image's, for a
    refusal)."""
    folder = tenant_folder(tenant)
    key = json.dumps([DRAWING, list(map(dict, boxes)), sorted(colours.items())], sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    drawn = folder / f"{sha}{SHOWN}{digest}.png"
    if not drawn.exists():
        data = await drawing.store.image(tenant, sha)
        work = partial(_write_both, data, boxes, colours, drawn)
        await counted(drawing.budget, data, number, work)
    return drawn


def _write_both(data: bytes, boxes: Boxes, colours: Mapping[str, RGB], drawn: Path) -> None:
    """Decode ``data`` once: its upright picture saved as it is, then with ``boxes`` drawn."""
    drawn.parent.mkdir(parents=True, exist_ok=True)
    with Image.open(io.BytesIO(data)) as image:
        picture = upright(image)
    picture.picture.save(_swapped(drawn, False), "PNG")  # upright, no box
    drawn.write_bytes(png_bytes(draw(picture, as_boxes(boxes), colours)))


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
    drawing: Drawing, conversation: Conversation, chat: Messages, lang: Lang, show: bool
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
    drawn = await turn_messages(drawing, conversation.tenant, turn, numbers, lang)
    tail = str(chat[at]["content"])[len(turn.shown_answer) :]  # e.g. "no image was used"
    drawn[0]["content"] += tail
    return with_boxes_shown([*chat[:at], *drawn, *chat[at + 1 :]], show, conversation.tenant)


def _last_reply(chat: Sequence[dict[str, Any]]) -> int | None:
    for index in range(len(chat) - 1, -1, -1):
        message = chat[index]
        if message.get("role") == "assistant" and not message.get("metadata"):
            return index if isinstance(message.get("content"), str) else None
    return None
