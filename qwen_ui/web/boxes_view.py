"""A turn's boxes as people see them: the image with a labelled rectangle per box (one
colour per label, the same on every image of the answer), and a legend that names each
label with the conversation's number of its image ("red circle (image 1)").

Boxes come as the conversation keeps them (:mod:`qwen_ui.web.turn_record`):
``{"sha256", "label", "box"}`` on the image file's own pixels.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

from PIL import Image

from qwen_ui.engine.annotate import RGB, annotate, label_colours
from qwen_ui.engine.box_mapping import Box
from qwen_ui.web.i18n import Lang, t

Boxes = Sequence[Mapping[str, Any]]


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
    """The image file ``data`` upright, with ``boxes`` drawn on it, as PNG bytes."""
    with Image.open(io.BytesIO(data)) as image:
        drawn = annotate(image, as_boxes(boxes), colours or colours_of(boxes))
    out = io.BytesIO()
    drawn.save(out, "PNG", optimize=True)
    return out.getvalue()


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
