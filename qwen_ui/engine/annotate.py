"""Boxes drawn on an image: a labelled rectangle per box, one colour per label.

:func:`annotate` takes the image as its file stores it (``PIL.Image.open``, EXIF kept) and
boxes on that grid (what the ``done`` event carries), and returns the upright RGB image
people see, with the rectangles and labels drawn upright on it: what the chat shows and
what its download saves. Fonts come from the system (a CJK font when one is installed, so
Chinese labels render) or Pillow's bundled one; nothing is fetched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont, ImageOps

from qwen_ui.engine.box_mapping import Box, upright_box
from qwen_ui.engine.images import ORIENTATION

RGB = tuple[int, int, int]
# Tableau 10: distinct on photos and for the common colour-vision deficiencies
PALETTE: tuple[RGB, ...] = (
    (78, 121, 167),
    (242, 142, 43),
    (225, 87, 89),
    (118, 183, 178),
    (89, 161, 79),
    (237, 201, 72),
    (176, 122, 161),
    (255, 157, 167),
    (156, 117, 95),
    (186, 176, 172),
)
FONT_FILES = (
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/opentype/noto/NotoSerifCJK-Regular.ttc",
    "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
)
Font = ImageFont.FreeTypeFont | ImageFont.ImageFont


def label_colours(boxes: Sequence[Box]) -> dict[str, RGB]:
    """One colour per label, in order of first appearance (pass every box of an answer
    to keep a label's colour the same on all its images)."""
    colours: dict[str, RGB] = {}
    for box in boxes:
        if box.label not in colours:
            colours[box.label] = PALETTE[len(colours) % len(PALETTE)]
    return colours


def annotate(
    image: Image.Image, boxes: Sequence[Box], colours: Mapping[str, RGB] | None = None
) -> Image.Image:
    """``image`` upright, in RGB, with ``boxes`` (on the file's grid) drawn on it."""
    orientation = image.getexif().get(ORIENTATION, 1)
    upright = ImageOps.exif_transpose(image).convert("RGB")
    colours = colours or label_colours(boxes)
    side = min(upright.size)
    width = max(2, round(side / 250))
    font = _font(max(12, round(side / 30)))
    draw = ImageDraw.Draw(upright)
    for box in boxes:
        shown = upright_box(box.box, image.size, orientation)
        colour = colours.get(box.label, PALETTE[0])
        draw.rectangle(shown, outline=colour, width=width)
        if box.label:
            _label(draw, shown, box.label, colour, font)
    return upright


def _label(
    draw: ImageDraw.ImageDraw, box: tuple[int, int, int, int], text: str, colour: RGB, font: Font
) -> None:
    """The label on a filled tab above the box (inside it when the box touches the top),
    moved left as far as it must to stay on the image."""
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    pad = 3
    tab_w, tab_h = right - left + 2 * pad, bottom - top + 2 * pad
    x = max(0, min(box[0], draw.im.size[0] - tab_w))
    y = box[1] - tab_h if box[1] >= tab_h else box[1]
    draw.rectangle((x, y, x + tab_w, y + tab_h), fill=colour)
    draw.text((x + pad - left, y + pad - top), text, fill=_ink(colour), font=font)


def _ink(colour: RGB) -> RGB:
    """Black or white, whichever reads better on ``colour``."""
    r, g, b = colour
    return (0, 0, 0) if 0.299 * r + 0.587 * g + 0.114 * b > 150 else (255, 255, 255)


@lru_cache(maxsize=16)
def _font(size: int) -> Font:
    for name in FONT_FILES:
        if Path(name).is_file():
            try:
                return ImageFont.truetype(name, size)
            except OSError:
                continue
    return ImageFont.load_default(size)
