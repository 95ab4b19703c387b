"""A conversation exported: as JSON (turns, images by sha256, boxes, stages, timings, the
model and revision that answered), or as a zip of ``conversation.md`` that shows the images
from ``images/`` (each image once, plus a copy with the boxes drawn where an answer located
something) beside the same ``conversation.json``.

Images are numbered as the page and the stages number them (across the whole
conversation). Titles, questions and answers are written as Markdown text, never as HTML,
and the only links they keep are inline http(s) ones (:func:`markdown_text`): any other
link syntax (``[x](javascript:...)``, reference links, ``<scheme:...>``) stays text.
"""

from __future__ import annotations

import io
import json
import re
import time
import zipfile
from dataclasses import dataclass
from typing import Any

from PIL import Image

from qwen_ui.engine.conversations import Conversation, ConversationStore, StoredTurn
from qwen_ui.engine.errors import ConversationNotFound
from qwen_ui.web.boxes_view import (
    annotated_png,
    colours_of,
    images_with_boxes,
    legend,
    numbers_of,
    on_image,
)
from qwen_ui.web.i18n import Lang, t

FORMAT = "qwen-ui.conversation"
VERSION = 1
_MEDIA = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp", "gif": "image/gif"}
# an inline link (not an image) to an http(s) address, with plain text as its label
WEB_LINK = re.compile(r"(?<![!\\])\[([^\[\]\\\n]*)\]\((https?://[^\s()<>\\]+)\)")
_ESCAPES = {"\\": "\\\\", "[": "\\[", "]": "\\]", "&": "&amp;", "<": "&lt;", ">": "&gt;"}


def markdown_text(text: str) -> str:
    """``text`` for Markdown: its formatting kept, but no HTML and no link other than an
    inline http(s) one (backslashes and brackets escaped everywhere else)."""
    out, start = [], 0
    for link in WEB_LINK.finditer(text):
        out.append(_escaped(text[start : link.start()]))
        out.append(f"[{_escaped(link.group(1))}]({link.group(2).replace('&', '&amp;')})")
        start = link.end()
    return "".join(out) + _escaped(text[start:])


def _escaped(text: str) -> str:
    return "".join(_ESCAPES.get(c, c) for c in text)


@dataclass(frozen=True)
class ExportImage:
    """One image file of the conversation (``data`` empty when it expired from the store)."""

    sha256: str
    data: bytes
    extension: str
    width: int
    height: int

    @property
    def file(self) -> str:
        return f"images/{self.sha256[:16]}.{self.extension}"

    def boxes_file(self, turn: int) -> str:
        """The copy with turn ``turn``'s boxes drawn on it."""
        return f"images/{self.sha256[:16]}-boxes-{turn}.png"

    def to_dict(self, numbers: list[int]) -> dict[str, Any]:
        return {
            "sha256": self.sha256,
            "numbers": numbers,
            "file": self.file if self.data else None,
            "media_type": _MEDIA.get(self.extension, "application/octet-stream"),
            "bytes": len(self.data),
            "width": self.width,
            "height": self.height,
        }


async def gather_images(store: ConversationStore, conversation: Conversation) -> list[ExportImage]:
    """Each distinct image of the conversation once, in order of first appearance."""
    out = []
    for sha in dict.fromkeys(conversation.images):
        try:
            data = await store.image(conversation.tenant, sha)
        except ConversationNotFound:
            out.append(ExportImage(sha, b"", "bin", 0, 0))
            continue
        out.append(_described(sha, data))
    return out


def _described(sha: str, data: bytes) -> ExportImage:
    try:
        with Image.open(io.BytesIO(data)) as image:
            kind = (image.format or "bin").lower()
            width, height = image.size
    except OSError:
        return ExportImage(sha, data, "bin", 0, 0)
    return ExportImage(sha, data, "jpg" if kind == "jpeg" else kind, width, height)


def _iso(seconds: float) -> str | None:
    if not seconds:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _model_parts(model: str) -> tuple[str, str]:
    name, at, revision = model.rpartition("@")
    return (name, revision) if at else (model, "")


# --- JSON ----------------------------------------------------------------------------------


def to_json(conversation: Conversation, images: list[ExportImage]) -> dict[str, Any]:
    """The conversation as one JSON document (``format``/``version`` name its shape)."""
    numbers = numbers_of(conversation.images)
    positions: dict[str, list[int]] = {}
    for number, sha in enumerate(conversation.images, start=1):
        positions.setdefault(sha, []).append(number)
    return {
        "format": FORMAT,
        "version": VERSION,
        "id": conversation.id,
        "title": conversation.display_title,
        "created": _iso(conversation.created),
        "updated": _iso(conversation.updated),
        "exported": _iso(time.time()),
        "images": [image.to_dict(positions.get(image.sha256, [])) for image in images],
        "turns": [_turn_json(turn, numbers, first) for turn, first in _numbered(conversation)],
        "pending": [{"sha256": sha, "number": numbers[sha]} for sha in conversation.pending],
    }


def _numbered(conversation: Conversation) -> list[tuple[StoredTurn, int]]:
    """Each turn with the number of its first image."""
    out, first = [], 1
    for turn in conversation.turns:
        out.append((turn, first))
        first += len(turn.images)
    return out


def _turn_json(turn: StoredTurn, numbers: dict[str, int], first: int) -> dict[str, Any]:
    model, revision = _model_parts(turn.model)
    own = {sha: first + i for i, sha in enumerate(turn.images)}
    return {
        "question": turn.question,
        "answer": turn.answer,
        "answer_text": turn.shown_answer,
        "images": [{"sha256": sha, "number": first + i} for i, sha in enumerate(turn.images)],
        "boxes": [
            {**box, "image": own.get(box["sha256"], numbers.get(box["sha256"]))}
            for box in turn.boxes
        ],
        "stages": turn.stages,
        "timings": turn.timings,
        "model": model,
        "revision": revision,
        "answered": _iso(turn.answered),
    }


def json_bytes(conversation: Conversation, images: list[ExportImage]) -> bytes:
    return json.dumps(to_json(conversation, images), ensure_ascii=False, indent=2).encode()


# --- Markdown and the zip -----------------------------------------------------------------


def to_markdown(conversation: Conversation, images: list[ExportImage], lang: Lang) -> str:
    by_sha = {image.sha256: image for image in images}
    title = markdown_text(conversation.display_title or t("untitled", lang))
    lines = [f"# {title}", "", f"*{t('export_note', lang).format(when=_iso(time.time()))}*", ""]
    for index, (turn, first) in enumerate(_numbered(conversation), start=1):
        lines += _turn_markdown(index, turn, first, by_sha, lang)
    if conversation.pending:
        lines += [f"## {t('export_pending', lang)}", ""]
        start = len(conversation.images) - len(conversation.pending) + 1
        for i, sha in enumerate(conversation.pending):
            lines += [_image_line(by_sha.get(sha), start + i, lang), ""]
    return "\n".join(lines).rstrip() + "\n"


def _turn_markdown(
    index: int, turn: StoredTurn, first: int, by_sha: dict[str, ExportImage], lang: Lang
) -> list[str]:
    lines = [f"## {t('export_turn', lang).format(n=index)}", ""]
    own = {sha: first + i for i, sha in enumerate(turn.images)}
    for sha, number in own.items():
        lines += [_image_line(by_sha.get(sha), number, lang), ""]
    lines += [f"**{t('question', lang)}:** {markdown_text(turn.question)}", ""]
    lines += [f"**{t('export_answer', lang)}:** {markdown_text(turn.shown_answer)}", ""]
    if turn.boxes:
        located = markdown_text(legend(turn.boxes, own, lang))
        lines += [f"{t('export_boxes', lang)}: {located}", ""]
        for sha in images_with_boxes(turn.boxes):
            image = by_sha.get(sha)
            if image is not None and image.data:
                alt = t("boxes_alt", lang).format(number=own.get(sha, 0))
                lines += [f"![{alt}]({image.boxes_file(index)})", ""]
    if facts := _facts(turn):
        lines += [f"<sub>{facts}</sub>", ""]
    return lines


def _image_line(image: ExportImage | None, number: int, lang: Lang) -> str:
    if image is None or not image.data:
        name = image.sha256[:16] if image else ""
        alt = t("image_alt", lang).format(number=number, name=name)
        return f"*{alt}: {t('export_missing', lang)}*"
    alt = t("image_alt", lang).format(number=number, name=image.file.removeprefix("images/"))
    return f"![{alt}]({image.file})"


def _facts(turn: StoredTurn) -> str:
    parts = []
    if turn.model:
        parts.append(f"`{turn.model}`")
    if "total" in turn.timings:
        parts.append(f"{turn.timings['total']:.1f} s")
    return " · ".join(parts)


def zip_bytes(conversation: Conversation, images: list[ExportImage], lang: Lang) -> bytes:
    """``conversation.md``, ``conversation.json`` and ``images/``."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("conversation.md", to_markdown(conversation, images, lang))
        archive.writestr("conversation.json", json_bytes(conversation, images))
        for image in images:
            if image.data:
                archive.writestr(image.file, image.data)
        for name, drawn in _annotated(conversation, images):
            archive.writestr(name, drawn)
    return out.getvalue()


def _annotated(conversation: Conversation, images: list[ExportImage]) -> list[tuple[str, bytes]]:
    """(file name, PNG) of each image an answer located something on, its boxes drawn."""
    by_sha = {image.sha256: image for image in images if image.data}
    out = []
    for index, turn in enumerate(conversation.turns, start=1):
        colours = colours_of(turn.boxes)  # one colour per label over the whole answer
        for sha in images_with_boxes(turn.boxes):
            if (found := by_sha.get(sha)) is not None:
                drawn = annotated_png(found.data, on_image(turn.boxes, sha), colours)
                out.append((found.boxes_file(index), drawn))
    return out
