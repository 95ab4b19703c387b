"""Grounding boxes in answers: parse each Qwen-VL family's format, map boxes back to the
original image, draw them.

The families write boxes differently:

- ``qwen2_vl``: special-token tags,
  ``<|object_ref_start|>label<|object_ref_end|><|box_start|>(x1,y1),(x2,y2)<|box_end|>``,
  in relative units of 0–1000 (several ``box_start`` runs may follow one label);
- ``qwen2_5_vl``: JSON ``{"bbox_2d": [x1, y1, x2, y2], "label": "..."}`` (one object or a
  list, often in a ```json fence) in absolute pixels of the image *as the processor resized
  it*;
- ``qwen3_vl``: the same JSON in relative units of 0–1000.

:func:`parse_boxes` finds them and replaces them in the text by their labels; anything that
does not parse cleanly (a truncated list, three coordinates, a string for a number) stays
in the text as it was: a box is never guessed.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Family = Literal["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]
FAMILIES: tuple[Family, ...] = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")

Coords = tuple[float, float, float, float]
# Qwen2-VL's grounding tags: special tokens a decoder must keep for its boxes to survive
GROUNDING_TOKENS = ("<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>", "<|box_end|>")


def family_of(model_type: str) -> Family | None:
    """The box format of a model, from its config's ``model_type`` (None: no known one)."""
    for family in FAMILIES:
        if model_type == family:
            return family
    return None


@dataclass(frozen=True)
class RawBox:
    """A box as the model wrote it, in its family's units (see the module docstring).
    ``image`` is 1-based, set only when the answer says which image the box is in."""

    label: str
    box: Coords
    image: int | None = None


@dataclass(frozen=True)
class ParsedAnswer:
    """``text``: the answer with every parsed box replaced by its label; ``boxes`` in the
    order they appear."""

    text: str
    boxes: tuple[RawBox, ...]


@dataclass(frozen=True)
class _Images:
    """What a box may say about its image: the highest number it may name, and whether it
    may name none."""

    highest: int
    unnamed: bool


def parse_boxes(
    text: str, family: Family, images: int = 1, unnamed: bool | None = None
) -> ParsedAnswer:
    """The boxes of ``text`` in ``family``'s format, and the text with them as labels.

    ``images``: the highest image number a box may name (1 to ``images``); a number out of
    that range always leaves the box as text. ``unnamed``: whether a box that names no
    image counts (by default only with one image); one that does not count is left in
    the text.
    """
    scope = _Images(max(images, 1), images <= 1 if unnamed is None else unnamed)
    if family == "qwen2_vl":
        return _parse_tags(text, scope)
    return _parse_json(text, scope)


# --- Qwen2-VL: special-token tags ----------------------------------------------------------

_NUM = r"\s*(-?\d+(?:\.\d+)?)\s*"
_BOX = rf"<\|box_start\|>\s*\({_NUM},{_NUM}\)\s*,\s*\({_NUM},{_NUM}\)\s*<\|box_end\|>"
_REF = r"<\|object_ref_start\|>(.*?)<\|object_ref_end\|>"
_TAGGED = re.compile(rf"(?:{_REF}\s*)?((?:{_BOX}\s*)+)", re.DOTALL)
_ONE_BOX = re.compile(_BOX)
_LONE_REF = re.compile(_REF, re.DOTALL)


def _parse_tags(text: str, images: _Images) -> ParsedAnswer:
    """Tags never name an image: where a box must name one, nothing is parsed."""
    if not images.unnamed:
        return ParsedAnswer(text, ())
    boxes: list[RawBox] = []

    def replace(match: re.Match[str]) -> str:
        label = (match.group(1) or "").strip()
        run = match.group(2)
        found = [_coords(m.groups()) for m in _ONE_BOX.finditer(run)]
        boxes.extend(RawBox(label, box) for box in found if box is not None)
        trailing = run[len(run.rstrip()) :]
        return label + trailing

    replaced = _TAGGED.sub(replace, text)
    replaced = _LONE_REF.sub(lambda m: m.group(1).strip(), replaced)
    return ParsedAnswer(replaced, tuple(boxes))


def _coords(values: Sequence[Any]) -> Coords | None:
    """Four finite numbers (numbers or digit strings from a regex), else None."""
    if len(values) != 4:
        return None
    out: list[float] = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            return None
        try:
            number = float(value)
        except ValueError:
            return None
        if not math.isfinite(number):
            return None
        out.append(number)
    return (out[0], out[1], out[2], out[3])


# --- Qwen2.5-VL / Qwen3-VL: JSON --------------------------------------------------------------

_FENCE = re.compile(r"```[ \t]*(?:json)?[ \t]*\n?(.*?)```", re.DOTALL | re.IGNORECASE)
_IMAGE_KEYS = ("image", "image_index", "image_id")
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class _Found:
    """A JSON value at ``text[start:end]`` and what it holds: boxes, and the items that are
    not boxes (kept in the text)."""

    start: int
    end: int
    boxes: tuple[RawBox, ...]
    rest: tuple[Any, ...]


def _parse_json(text: str, images: _Images) -> ParsedAnswer:
    pieces: list[str] = []
    boxes: list[RawBox] = []
    position = 0
    for found in _json_values(text, images):
        pieces.append(text[position : found.start])
        pieces.append(_readable(found))
        boxes.extend(found.boxes)
        position = found.end
    pieces.append(text[position:])
    return ParsedAnswer("".join(pieces), tuple(boxes))


def _json_values(text: str, images: _Images) -> Iterator[_Found]:
    """Box-holding JSON values in ``text``, left to right: a fenced block whose whole
    content is box JSON (the fence goes with it), else any JSON value found by scanning."""
    position = 0
    while position < len(text):
        found = _fenced_at(text, position, images) or _bare_at(text, position, images)
        if found is None:
            position += 1
            continue
        yield found
        position = found.end


def _fenced_at(text: str, position: int, images: _Images) -> _Found | None:
    if not text.startswith("```", position):
        return None
    match = _FENCE.match(text, position)
    if match is None:
        return None
    try:
        value = json.loads(match.group(1))
    except ValueError:
        return None
    found = _classify(value, match.start(), match.end(), images)
    return found if found is not None and not found.rest else None


def _bare_at(text: str, position: int, images: _Images) -> _Found | None:
    if text[position] not in "[{":
        return None
    try:
        value, end = _DECODER.raw_decode(text, position)
    except (ValueError, RecursionError):
        return None
    return _classify(value, position, end, images)


def _classify(value: Any, start: int, end: int, images: _Images) -> _Found | None:
    """Boxes in a JSON value (one box object, or a list with at least one), else None."""
    items = value if isinstance(value, list) else [value]
    boxes: list[RawBox] = []
    rest: list[Any] = []
    for item in items:
        box = _json_box(item, images)
        if box is None:
            rest.append(item)
        else:
            boxes.append(box)
    if not boxes:
        return None
    return _Found(start, end, tuple(boxes), tuple(rest))


def _json_box(item: Any, images: _Images) -> RawBox | None:
    if not isinstance(item, dict):
        return None
    coords = item.get("bbox_2d")
    if not isinstance(coords, list):
        return None
    box = _coords([c if isinstance(c, int | float) else None for c in coords])
    label = item.get("label", "")
    if box is None or not isinstance(label, str):
        return None
    image = _image_of(item, images)
    if image is False or (image is None and not images.unnamed):
        return None
    return RawBox(label.strip(), box, image)


def _image_of(item: dict[str, Any], images: _Images) -> int | Literal[False] | None:
    """The 1-based image number an object names (None: none named; False: a bad one)."""
    for key in _IMAGE_KEYS:
        if key in item:
            value = item[key]
            if isinstance(value, bool) or not isinstance(value, int):
                return False
            return value if 1 <= value <= images.highest else False
    return None


def _readable(found: _Found) -> str:
    """The labels of a JSON value's boxes (``star ×3`` for repeats), then whatever in it
    was not a box, as JSON."""
    text = labels_text(found.boxes)
    if found.rest:
        rest = json.dumps(list(found.rest), ensure_ascii=False)
        text = f"{text} {rest}" if text else rest
    return text


def labels_text(boxes: Sequence[RawBox]) -> str:
    """The distinct labels in order of appearance, a count after repeated ones."""
    counts: dict[str, int] = {}
    for box in boxes:
        if box.label:
            counts[box.label] = counts.get(box.label, 0) + 1
    return ", ".join(label if n == 1 else f"{label} ×{n}" for label, n in counts.items())
