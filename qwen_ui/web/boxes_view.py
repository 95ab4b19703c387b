"""A turn's boxes as people see them: the image with a labelled rectangle per box (one
colour per label, the same on every image of the answer), and a legend that names each
label with the conversation's number of its image ("red circle (image 1)").

Boxes come as the conversation keeps them (:mod:`qwen_ui.web.turn_record`):
``{"sha256", "label", "box"}`` on the image file's own pixels.

Drawing decodes the image once, at full size: :func:`counted` runs it in a thread while its
cost (:func:`~qwen_ui.engine.annotate.drawing_cost`, from the header) is held in the app's
decode budget, so an image that could never fit is refused
(:class:`~qwen_ui.engine.errors.ImageDecodeBudget`) and a busy budget is waited for (at
most its timeout, then :class:`~qwen_ui.engine.errors.DecodeBusy`).
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from PIL import Image

from qwen_ui.engine.annotate import RGB, draw, drawing_cost, label_colours, upright
from qwen_ui.engine.box_mapping import Box
from qwen_ui.engine.decoding import DecodeBudget
from qwen_ui.web.i18n import Lang, t

Boxes = Sequence[Mapping[str, Any]]
T = TypeVar("T")


def as_boxes(boxes: Boxes, number: int = 1) -> list[Box]:
    return [Box(number, str(b["label"]), _coords(b["box"])) for b in boxes]


def _coords(values: Sequence[Any]) -> tuple[int, int, int, int]:
    x1, y1, x2, y2 = (int(v) for v in values)
    return x1, y1, x2, y2


def colours_of(boxes: Boxes) -> dict[str, RGB]:
    """One colour per label over all of an answer's boxes."""
    return label_colours(as_boxes(boxes))


def on_image(boxes: Boxes, sha256: str) -> list[Mapping[str, Any]]:
    return [b for b in boxes if b.get("sha256") == sha256]


def images_with_boxes(boxes: Boxes) -> list[str]:
    """The sha256 of each image that has boxes, in order of first appearance."""
    return list(dict.fromkeys(str(b["sha256"]) for b in boxes))


def annotated_png(data: bytes, boxes: Boxes, colours: Mapping[str, RGB] | None = None) -> bytes:
    """The image file ``data`` upright, with ``boxes`` drawn on it, as PNG bytes (one
    decode, uncounted: callers run it through :func:`counted`)."""
    with Image.open(io.BytesIO(data)) as image:
        picture = upright(image)
    return png_bytes(draw(picture, as_boxes(boxes), colours or colours_of(boxes)))


def png_bytes(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, "PNG", optimize=True)
    return out.getvalue()


def cost_of(data: bytes) -> int:
    """Host bytes drawing on the image file ``data`` takes at its peak (its header read)."""
    with Image.open(io.BytesIO(data)) as image:
        return drawing_cost(image)


async def counted(budget: DecodeBudget, data: bytes, number: int, work: Callable[[], T]) -> T:
    """``work()``, which decodes the image file ``data`` once and draws on it, run in a
    thread while its cost is held in ``budget`` (``number``: the image's, for the error)."""
    cost = await asyncio.to_thread(cost_of, data)
    async with budget.hold(cost, number):
        running = asyncio.ensure_future(asyncio.to_thread(work))
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            await asyncio.wait({running})  # its pixels stay counted until the thread ends
            raise


def legend(boxes: Boxes, numbers: Mapping[str, int], lang: Lang) -> str:
    """Each label with its image's number, a count after repeats: "star ×2 (image 3)"."""
    counts: dict[tuple[str, int], int] = {}
    for box in boxes:
        number = numbers.get(str(box["sha256"]), 0)
        key = (str(box["label"]) or t("box_unlabelled", lang), number)
        counts[key] = counts.get(key, 0) + 1
    where = t("box_on_image", lang)
    parts = []
    for (label, number), n in counts.items():
        shown = label if n == 1 else f"{label} ×{n}"
        parts.append(where.format(label=shown, number=number) if number else shown)
    return t("box_list_sep", lang).join(parts)


def numbers_of(images: Sequence[str]) -> dict[str, int]:
    """The conversation's number of each image (1-based; an image shown twice keeps its
    latest number, the one the answer saw)."""
    return {sha: i for i, sha in enumerate(images, start=1)}
