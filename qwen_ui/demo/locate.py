"""Grounding questions of the demo grammar: "Where is the red circle?" / "红色的圆形在哪里？"
(one shape, named by colour and kind) and "Where are the stars?" / "星形都在哪里？" (every
shape of a kind), answered as Qwen2.5-VL answers them: a JSON list of
``{"bbox_2d": [x1, y1, x2, y2], "label": "…"}`` in a ```` ```json ```` fence, in pixels of
the image as the processor resized it (what the model sees), so the engine's box parser
serves the demo model and the production model alike.
"""

from __future__ import annotations

import json
import math
import random

from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

from qwen_ui.demo import scenes

FACTOR = 28  # patch 14 x merge 2: the processor resizes to multiples of this
MIN_PIXELS = 56 * 56  # modelcfg.MIN_PIXELS (the shipped preprocessor_config.json)
MAX_PIXELS = 336 * 336  # modelcfg.MAX_PIXELS
MAX_TARGETS = 4  # "Where are the stars?" asks about 2 to this many shapes
EVERY_SHARE = 0.4  # the grammar's share of "Where are the stars?" among grounding questions

Box = tuple[int, int, int, int]


def resized_size(width: int, height: int) -> tuple[int, int]:
    """(width, height) of an image after the processor's resize (Qwen2-VL's
    ``smart_resize``: multiples of 28, area within the pixel limits)."""
    h_bar, w_bar = smart_resize(
        height, width, factor=FACTOR, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS
    )
    return int(w_bar), int(h_bar)


def extent(shape: scenes.Shape) -> tuple[float, float, float, float]:
    """The tight bounding box of ``shape`` as :func:`scenes.render` draws it, in the
    scene's pixels."""
    s = shape
    if s.kind == "circle":
        return s.cx - s.r, s.cy - s.r, s.cx + s.r, s.cy + s.r
    if s.kind == "square":
        k = s.r * 0.85
        return s.cx - k, s.cy - k, s.cx + k, s.cy + k
    if s.kind == "triangle":
        h = s.r * math.sqrt(3) / 2
        return s.cx - h, s.cy - s.r, s.cx + h, s.cy + s.r / 2
    xs, ys = zip(*scenes.star_points(s.cx, s.cy, s.r), strict=True)
    return min(xs), min(ys), max(xs), max(ys)


def resized_box(scene: scenes.Scene, shape: scenes.Shape) -> Box:
    """``shape``'s bounding box in whole pixels of the resized image."""
    width, height = resized_size(scene.width, scene.height)
    fx, fy = width / scene.width, height / scene.height
    x1, y1, x2, y2 = extent(shape)
    return round(x1 * fx), round(y1 * fy), round(x2 * fx), round(y2 * fy)


def answer_text(boxes: list[tuple[Box, str]]) -> str:
    """Qwen2.5-VL's grounding answer: one JSON object per (box, label), left to right."""
    rows = [
        json.dumps({"bbox_2d": list(box), "label": label}, ensure_ascii=False)
        for box, label in sorted(boxes)
    ]
    return "```json\n[" + ", ".join(rows) + "]\n```"


def q_grounding(
    rng: random.Random, lang: scenes.Lang, every_share: float = EVERY_SHARE
) -> scenes.Made:
    """A grounding question: every shape of a kind (2 to :data:`MAX_TARGETS` of them) with
    probability ``every_share`` (the grammar's :data:`EVERY_SHARE`; training may ask for
    another), else one shape named by colour and kind (alone of both)."""
    if rng.random() < every_share:
        return _where_are(rng, lang)
    return _where_is(rng, lang)


def _where_is(rng: random.Random, lang: scenes.Lang) -> scenes.Made:
    kind, colour = scenes.random_spec(rng)
    n = rng.randint(1, scenes.MAX_SHAPES)

    def specs() -> list[scenes.Spec]:
        return [(kind, colour), *scenes.fill(rng, n - 1, lambda s: s != (kind, colour))]

    scene = scenes.scene_from(rng, specs)
    target = next(s for s in scene.shapes if (s.kind, s.colour) == (kind, colour))
    label = scenes.shape_name(target, lang)
    if lang == "en":
        question = f"Where is the {colour} {kind}?"
    else:
        question = f"{scenes.COLOUR_ZH[colour]}的{scenes.SHAPE_ZH[kind]}在哪里？"
    return question, answer_text([(resized_box(scene, target), label)]), (scene,)


def _where_are(rng: random.Random, lang: scenes.Lang) -> scenes.Made:
    kind = rng.choice(scenes.SHAPES)
    k = rng.randint(2, MAX_TARGETS)
    n = rng.randint(k, scenes.MAX_SHAPES)

    def specs() -> list[scenes.Spec]:
        same = [(kind, rng.choice(list(scenes.COLOURS))) for _ in range(k)]
        return same + scenes.fill(rng, n - k, lambda s: s[0] != kind)

    scene = scenes.scene_from(rng, specs)
    label = kind if lang == "en" else scenes.SHAPE_ZH[kind]
    boxes = [(resized_box(scene, s), label) for s in scene.shapes if s.kind == kind]
    if lang == "en":
        question = f"Where are the {scenes.SHAPE_PLURAL[kind]}?"
    else:
        question = f"{scenes.SHAPE_ZH[kind]}都在哪里？"
    return question, answer_text(boxes), (scene,)
