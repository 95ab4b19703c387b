"""Grounding questions of the demo grammar with their true answers: the scene, the shapes
asked about and their extents (what a drawn box must surround)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from qwen_ui.demo import evaluate, locate, scenes


@dataclass(frozen=True)
class Grounding:
    sample: scenes.Sample
    label: str
    shape_box: tuple[float, float, float, float]  # the shape's true extent, scene pixels


def grounding() -> Grounding:
    """The held-out set's first English "Where is the <colour> <kind>?" (one shape)."""
    sample = next(
        s
        for s in scenes.held_out(20, kinds=("grounding",))
        if s.lang == "en" and s.question.startswith("Where is")
    )
    (item,) = json.loads(sample.answer.split("\n", 1)[1].rsplit("\n", 1)[0])
    colour, kind = item["label"].split(" ")
    (shape,) = [s for s in sample.scenes[0].shapes if (s.colour, s.kind) == (colour, kind)]
    return Grounding(sample, item["label"], locate.extent(shape))


def asked_extents(sample: scenes.Sample) -> list[tuple[float, ...]]:
    """The true extents, in the scene file's own pixels, of the shapes a grounding question
    asks about (those whose resized box the grammar's answer gives)."""
    scene = sample.scenes[0]
    boxes = set(evaluate.coords_of(sample.answer))
    return [
        locate.extent(s)
        for s in scene.shapes
        if tuple(map(float, locate.resized_box(scene, s))) in boxes
    ]
