"""Grounding questions: the answer is Qwen2.5-VL's JSON, each box the named shape's
bounding box in pixels of the image as the processor resized it."""

from __future__ import annotations

import re

import numpy as np
import pytest
from PIL import Image, ImageDraw

from qwen_ui.demo import locate, scenes
from qwen_ui.demo.install import weights_dir
from qwen_ui.engine.boxes import parse_boxes

QUESTION = {
    "en": (re.compile(r"Where is the (\w+) (\w+)\?"), re.compile(r"Where are the (\w+)s\?")),
    "zh": (re.compile(r"(.+?)的(.+?)在哪里？"), re.compile(r"(.+?)都在哪里？")),
}
SHAPE_OF = {**{k: k for k in scenes.SHAPES}, **{v: k for k, v in scenes.SHAPE_ZH.items()}}
COLOUR_OF = {**{c: c for c in scenes.COLOURS}, **{v: k for k, v in scenes.COLOUR_ZH.items()}}


def targets(item: scenes.Sample) -> list[scenes.Shape]:
    """The shapes a grounding question asks about, read from its text (a test parser)."""
    one, many = QUESTION[item.lang]
    scene = item.scenes[0]
    if found := one.fullmatch(item.question):
        colour, kind = COLOUR_OF[found[1]], SHAPE_OF[found[2]]
        return [s for s in scene.shapes if (s.colour, s.kind) == (colour, kind)]
    found = many.fullmatch(item.question)
    assert found, item.question
    kind = SHAPE_OF[found[1]]
    return [s for s in scene.shapes if s.kind == kind]


def drawn_box(scene: scenes.Scene, shape: scenes.Shape) -> tuple[float, ...]:
    """``shape``'s painted pixels' bounding box, scaled to the resized image."""
    mask = Image.new("L", (scene.width, scene.height), 0)
    scenes.draw_shape(ImageDraw.Draw(mask), shape, fill=255)
    ys, xs = np.nonzero(np.asarray(mask))
    width, height = locate.resized_size(scene.width, scene.height)
    fx, fy = width / scene.width, height / scene.height
    return xs.min() * fx, ys.min() * fy, (xs.max() + 1) * fx, (ys.max() + 1) * fy


@pytest.mark.parametrize("lang", scenes.LANGS)
def test_every_answer_locates_the_asked_shapes(lang: scenes.Lang) -> None:
    for seed in range(120):
        item = scenes.sample(seed, "grounding", lang)
        assert item.answer.startswith("```json\n[") and item.answer.endswith("]\n```")
        wanted = targets(item)
        assert 1 <= len(wanted) <= locate.MAX_TARGETS
        boxes = parse_boxes(item.answer, "qwen2_5_vl").boxes
        assert len(boxes) == len(wanted)
        assert [b.box[0] for b in boxes] == sorted(b.box[0] for b in boxes)  # left to right
        for shape in wanted:
            drawn = drawn_box(item.scenes[0], shape)
            near = [
                b
                for b in boxes
                if all(abs(a - c) <= 2.0 for a, c in zip(b.box, drawn, strict=True))
            ]
            assert len(near) == 1, (item.question, drawn, boxes)
            plural = QUESTION[lang][1].fullmatch(item.question)
            word = shape.kind if lang == "en" else scenes.SHAPE_ZH[shape.kind]
            assert near[0].label == (word if plural else scenes.shape_name(shape, lang))


def test_singular_questions_name_a_unique_shape_and_plural_ones_several() -> None:
    items = [scenes.sample(seed, "grounding") for seed in range(200)]
    for item in items:
        wanted = targets(item)
        if QUESTION[item.lang][0].fullmatch(item.question):
            assert len(wanted) == 1
        else:
            assert len(wanted) >= 2
    assert {len(targets(i)) for i in items} == {1, 2, 3, 4}


def test_every_share_steers_the_form_and_the_grammar_keeps_its_own() -> None:
    def plural(every_share: float | None) -> int:
        items = [scenes.sample(s, "grounding", every_share=every_share) for s in range(300)]
        return sum(bool(QUESTION[i.lang][1].fullmatch(i.question)) for i in items)

    assert plural(1.0) == 300 and plural(0.0) == 0
    grammar = plural(None)
    assert grammar == plural(locate.EVERY_SHARE)
    assert 80 < grammar < 160 < plural(0.8) < 300


@pytest.mark.parametrize("size", [(160, 160), (480, 160), (333, 451), (200, 479), (480, 480)])
def test_resized_size_is_what_the_processor_gives(size: tuple[int, int]) -> None:
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(str(weights_dir("bf16")))
    out = processor.image_processor(images=[Image.new("RGB", size)], return_tensors="pt")
    _, grid_h, grid_w = out["image_grid_thw"][0].tolist()
    assert locate.resized_size(*size) == (grid_w * 14, grid_h * 14)
