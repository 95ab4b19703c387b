"""Boxes from the model's units back to the original file's pixels.

The model saw each image upright (EXIF orientation applied, see
:mod:`qwen_ui.engine.images`) and resized by its processor (sides multiples of patch ×
merge: 28 px for Qwen2/2.5-VL, 32 px for Qwen3-VL, pixel count within the bounds). A box
comes back in that resized image's pixels (Qwen2.5-VL) or in 0–1000 of its sides (Qwen2-VL,
Qwen3-VL). :func:`to_original` scales it to the upright original, clamps it to the image,
then undoes the EXIF rotation or flip, so the box lands on the file's own pixel grid (what
``PIL.Image.open`` gives before ``exif_transpose``).

The resized size comes from the processor itself: the grid its vision tower was given
(:meth:`ImageGeometry.of_grid`), so the arithmetic here never repeats the resize.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from qwen_ui.engine.boxes import Family, ParsedAnswer, RawBox, parse_boxes
from qwen_ui.engine.images import upright_of

RELATIVE_SCALE = 1000.0  # Qwen2-VL and Qwen3-VL: box sides in 0..1000
TRANSPOSED = frozenset({5, 6, 7, 8})  # EXIF orientations that swap width and height


@dataclass(frozen=True)
class ImageGeometry:
    """One image as the file stores it and as the model saw it.

    ``size``: (width, height) of the file's pixel grid, before EXIF orientation;
    ``orientation``: the EXIF orientation (1–8; 1 when absent); ``resized``: (width,
    height) of the upright image after the processor's resize.
    """

    size: tuple[int, int]
    orientation: int
    resized: tuple[int, int]

    @property
    def upright(self) -> tuple[int, int]:
        """(width, height) as displayed, EXIF orientation applied."""
        width, height = self.size
        return (height, width) if self.orientation in TRANSPOSED else (width, height)

    @classmethod
    def of_grid(
        cls, upright: tuple[int, int], orientation: int, grid_thw: Sequence[int], patch: int
    ) -> ImageGeometry:
        """From the upright size and the vision tower's patch grid (``t, h, w``)."""
        width, height = upright
        size = (height, width) if orientation in TRANSPOSED else (width, height)
        _, rows, cols = grid_thw
        return cls(size, orientation if 1 <= orientation <= 8 else 1, (cols * patch, rows * patch))


@dataclass(frozen=True)
class Box:
    """A box on the original file's pixel grid; ``image``: its image's number (1-based;
    in the conversation's images for an answer's boxes)."""

    image: int
    label: str
    box: tuple[int, int, int, int]

    @property
    def empty(self) -> bool:
        x1, y1, x2, y2 = self.box
        return x2 <= x1 or y2 <= y1

    def to_dict(self) -> dict[str, Any]:
        return {"image": self.image, "label": self.label, "box": list(self.box)}


def to_original(raw: RawBox, geometry: ImageGeometry, family: Family) -> Box:
    """``raw`` on the original file's pixel grid (clamped to it; it may come out empty
    when the model put it wholly outside the image)."""
    width, height = geometry.upright
    sx, sy = _scale(geometry, family)
    x1, y1, x2, y2 = raw.box
    left, right = sorted((_clamp(x1 * sx, width), _clamp(x2 * sx, width)))
    top, bottom = sorted((_clamp(y1 * sy, height), _clamp(y2 * sy, height)))
    corners = [_unorient(x, y, geometry) for x, y in ((left, top), (right, bottom))]
    (ax, ay), (bx, by) = corners
    box = (round(min(ax, bx)), round(min(ay, by)), round(max(ax, bx)), round(max(ay, by)))
    return Box(raw.image or 1, raw.label, box)


def locate(
    parsed: ParsedAnswer,
    geometries: Mapping[int, ImageGeometry],
    family: Family,
    default: int | None = 1,
) -> list[Box]:
    """Every parsed box that lands on its image, mapped; ``geometries`` by image number,
    ``default`` the number of the image a box that names none is on. A box for an image
    that is not in ``geometries`` or that falls wholly outside its image is dropped."""
    out: list[Box] = []
    for raw in parsed.boxes:
        number = raw.image or default
        geometry = geometries.get(number) if number is not None else None
        if number is None or geometry is None:
            continue
        box = replace(to_original(raw, geometry, family), image=number)
        if not box.empty:
            out.append(box)
    return out


def upright_box(
    box: tuple[int, int, int, int], size: tuple[int, int], orientation: int
) -> tuple[int, int, int, int]:
    """A box of the file's grid (``size``) on the upright image, as it is displayed: the
    inverse of :func:`to_original`'s last step, for drawing."""
    corners = [_orient(x, y, size, orientation) for x, y in (box[:2], box[2:])]
    (ax, ay), (bx, by) = corners
    return (min(ax, bx), min(ay, by), max(ax, bx), max(ay, by))


def _orient(x: int, y: int, size: tuple[int, int], orientation: int) -> tuple[int, int]:
    width, height = size
    match orientation:
        case 2:
            return width - x, y
        case 3:
            return width - x, height - y
        case 4:
            return x, height - y
        case 5:
            return y, x
        case 6:
            return height - y, x
        case 7:
            return height - y, width - x
        case 8:
            return y, width - x
        case _:
            return x, y


@dataclass(frozen=True)
class SeenImage:
    """An image of the prompt: its number in the conversation (1-based, as the page and
    the prompt's labels count), its file's sha256 and the vision tower's patch grid."""

    number: int
    sha256: str
    grid: tuple[int, int, int]


@dataclass(frozen=True)
class PromptImages:
    """The images an answer may locate things on: the prompt's, in its order (the
    conversation's latest ones), ``turn`` of the last of them brought by the question
    asked now (new, or put back by a retry or an edit)."""

    images: tuple[SeenImage, ...]
    turn: int

    @property
    def about(self) -> SeenImage | None:
        """The image a box that names none is on: the question's own image when it has
        one; without any, the prompt's only image; None when that is ambiguous."""
        if self.turn == 1 or (self.turn == 0 and len(self.images) == 1):
            return self.images[-1]
        return None

    def numbered(self, number: int) -> SeenImage | None:
        return next((image for image in self.images if image.number == number), None)


def find_boxes(answer: str, family: Family | None, seen: PromptImages) -> ParsedAnswer | None:
    """The answer's boxes on the prompt's images (an image named by its number in the
    conversation); None when it has none. With several images and no single one the
    question is about, a box that names no image stays text."""
    if family is None or not seen.images:
        return None
    highest = max(image.number for image in seen.images)
    parsed = parse_boxes(answer, family, images=highest, unnamed=seen.about is not None)
    return parsed if parsed.boxes else None


def images_of(parsed: ParsedAnswer, seen: PromptImages) -> list[SeenImage]:
    """The prompt's images that ``parsed``'s boxes are on (each once, in prompt order)."""
    about = seen.about
    numbers = {raw.image or (about.number if about else 0) for raw in parsed.boxes}
    return [image for image in seen.images if image.number in numbers]


def locate_seen(
    parsed: ParsedAnswer,
    seen: PromptImages,
    files: Mapping[str, bytes],
    family: Family,
    patch: int,
) -> list[Box]:
    """``parsed``'s boxes on the original files (``files`` by sha256; a box on an image
    whose file is missing is dropped), each naming its image by its number in the
    conversation. The files' EXIF facts are read again from their headers: admission may
    have downscaled the pixels the model saw."""
    geometries = {}
    for image in images_of(parsed, seen):
        data = files.get(image.sha256)
        if data is not None:
            size, orientation = upright_of(data)
            geometries[image.number] = ImageGeometry.of_grid(size, orientation, image.grid, patch)
    about = seen.about
    return locate(parsed, geometries, family, about.number if about else None)


def _scale(geometry: ImageGeometry, family: Family) -> tuple[float, float]:
    """Upright original pixels per model unit, along x and y."""
    width, height = geometry.upright
    if family == "qwen2_5_vl":
        resized_w, resized_h = geometry.resized
        return width / resized_w, height / resized_h
    return width / RELATIVE_SCALE, height / RELATIVE_SCALE


def _clamp(value: float, limit: int) -> float:
    return min(max(value, 0.0), float(limit))


def _unorient(u: float, v: float, geometry: ImageGeometry) -> tuple[float, float]:
    """A point of the upright image on the file's grid: the inverse of the transpose that
    ``ImageOps.exif_transpose`` applies for each orientation."""
    width, height = geometry.size
    match geometry.orientation:
        case 2:  # mirrored left-right
            return width - u, v
        case 3:  # turned 180°
            return width - u, height - v
        case 4:  # mirrored top-bottom
            return u, height - v
        case 5:  # transposed
            return v, u
        case 6:  # turned 90° clockwise to display
            return v, height - u
        case 7:  # transversed
            return width - v, height - u
        case 8:  # turned 90° counter-clockwise to display
            return width - v, u
        case _:
            return u, v
