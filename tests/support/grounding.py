"""Grounding questions of the demo grammar with their true answers: the scene, the shapes
asked about and their extents (what a drawn box must surround), and the check that
boxes as the engine returns them (``done.boxes``, the API's ``boxes``) are right."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from qwen_ui.demo import evaluate, locate, scenes


@dataclass(frozen=True)
class Grounding:
    sample: scenes.Sample
    label: str
    shape_box: tuple[float, ...]  # the shape's true extent, scene pixels


def grounding() -> Grounding:
    """The held-out set's first English "Where is the <colour> <kind>?" (one shape)."""
    sample = next(
        s
        for s in scenes.held_out(20, kinds=("grounding",))
        if s.lang == "en" and s.question.startswith("Where is")
    )
    (box,) = evaluate.boxes_of(sample.answer)
    (extent,) = asked_extents(sample)
    return Grounding(sample, box.label, extent)


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


def boxes_right(boxes: Sequence[dict[str, Any]], sample: scenes.Sample) -> bool:
    """Boxes as the engine returns them (``{"image", "label", "box"}``, the file's pixels)
    answer ``sample``: one per asked shape (:func:`evaluate.matches` against the shapes'
    true extents), with the grammar's labels, all on image 1."""
    got = [tuple(map(float, b["box"])) for b in boxes]
    labels = sorted(b.label for b in evaluate.boxes_of(sample.answer))
    return (
        evaluate.matches(got, asked_extents(sample))
        and sorted(b["label"] for b in boxes) == labels
        and {b["image"] for b in boxes} == {1}
    )
