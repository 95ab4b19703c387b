"""The newcomers' images through the vision tower (:mod:`qwen_ui.engine.answering`):
in one pass, or one pass per image beside running answers."""

from __future__ import annotations

from typing import Any, cast

import torch
from PIL import Image

from qwen_ui.engine.answering import _encoded
from qwen_ui.engine.cache import Embedding
from qwen_ui.engine.pipelines import VisionPipeline


class Tower:
    """Records the images of each pass; an image's embedding is its width."""

    def __init__(self) -> None:
        self.passes: list[int] = []

    def encode_many(self, images: list[Image.Image], timings: dict[str, float]) -> list[Any]:
        self.passes.append(len(images))
        timings["patches"] = 0.25
        return [Embedding(torch.full((1, 1), float(i.width)), (1, 2, 2)) for i in images]


def test_images_go_through_the_tower_together_or_one_at_a_time() -> None:
    images = [Image.new("RGB", (w, 8)) for w in (8, 16, 24)]
    for one_by_one, passes in ((False, [3]), (True, [1, 1, 1])):
        tower, parts = Tower(), {}
        out = _encoded(cast(VisionPipeline, tower), images, parts, one_by_one)
        assert tower.passes == passes
        assert [float(e.features[0, 0]) for e in out] == [8.0, 16.0, 24.0]  # in order
        assert parts["patches"] == 0.25 * len(passes)  # the patches' time, in all
