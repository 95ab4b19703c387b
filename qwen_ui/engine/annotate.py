"""Boxes drawn on an image: a labelled rectangle per box, one colour per label.

:func:`upright` decodes an image as its file stores it (``PIL.Image.open``, EXIF kept) once,
to the upright RGB picture people see; :func:`draw` draws boxes on that file's grid (what
the ``done`` event carries) upright onto the picture: what the chat shows and what its
download saves. :func:`annotate` does both. :func:`drawing_cost` says from the header alone
how many bytes of host memory that takes at its peak (what the app's decode budget
counts). Fonts come from the system (a CJK font when one is installed, so Chinese labels
render) or Pillow's bundled one; nothing is fetched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from qwen_ui.engine.box_mapping import Box, upright_box
from qwen_ui.engine.images import TRANSPOSE, decoded_bytes, exif_orientation, pixel_bytes

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


@dataclass(frozen=True)
class Upright:
    """An image decoded once: its upright RGB picture, and the facts that map boxes on
    its file's grid onto that picture."""

    picture: Image.Image
    file_size: tuple[int, int]
    orientation: int  # the file's EXIF orientation (1-8)


def upright(image: Image.Image) -> Upright:
    """``image`` (as its file stores it, opened) decoded, in RGB, turned as its EXIF says
    (read once decoded: a PNG's EXIF may follow its pixels)."""
    image.load()
    orientation = exif_orientation(image)
    rgb = image.convert("RGB")
    method = TRANSPOSE.get(orientation)
    return Upright(rgb if method is None else rgb.transpose(method), image.size, orientation)


def drawing_cost(image: Image.Image) -> int:
    """Host bytes :func:`upright` and :func:`draw` take at their peak, from ``image``'s
    header (opened, not decoded): the picture as decoded, its RGB copy and that copy
    turned upright (the boxes are drawn in place)."""
    width, height = image.size
    return decoded_bytes(image) + width * height * 2 * pixel_bytes("RGB")


def draw(
    image: Upright, boxes: Sequence[Box], colours: Mapping[str, RGB] | None = None
) -> Image.Image:
    """``boxes`` (on the file's grid) drawn on ``image``'s picture, in place; returns it."""
    picture = image.picture
    colours = colours or label_colours(boxes)
    side = min(picture.size)
    width = max(2, round(side / 250))
    font = _font(max(12, round(side / 30)))
    pen = ImageDraw.Draw(picture)
    for box in boxes:
        shown = upright_box(box.box, image.file_size, image.orientation)
        colour = colours.get(box.label, PALETTE[0])
        pen.rectangle(shown, outline=colour, width=width)
        if box.label:
            _label(pen, shown, box.label, colour, font)
    return picture


def annotate(
    image: Image.Image, boxes: Sequence[Box], colours: Mapping[str, RGB] | None = None
) -> Image.Image:
    """``image`` upright, in RGB, with ``boxes`` (on the file's grid) drawn on it."""
    return draw(upright(image), boxes, colours)


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
