"""The language pipeline's prompt (``LanguagePipeline.build_prompt``): the processor's own
token ids, though each image placeholder is tokenized once and widened among the ids."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from qwen_ui.engine.errors import UnsupportedModel
from qwen_ui.engine.pipelines import (
    Loaded,
    ModelSpec,
    Pipelines,
    Turn,
    expand_image_ids,
    messages,
    patches,
)
from qwen_ui.engine.status import EngineStatus
from qwen_ui.store import ModelStore
from tests.engine.conftest import TINY_ID

SIZE = {"shortest_edge": 3136, "longest_edge": 112 * 112}
IMAGES = [Image.new("RGB", (100, 80), (255, 0, 0)), Image.new("RGB", (60, 120), (0, 0, 255))]
CASES = [
    [Turn("No picture here?", 0)],
    [Turn("What shape is it?", 1)],
    [Turn("How many squares?", 1, "two"), Turn("And in this one, 图中有几个？", 1)],
]


@pytest.fixture(scope="module")
def loaded(tiny_store: ModelStore) -> Loaded:
    return Pipelines(
        tiny_store, ModelSpec(TINY_ID, "bf16", "cpu", 3136, 112 * 112), EngineStatus()
    ).load()


@pytest.mark.parametrize("turns", CASES, ids=["text", "one-image", "history"])
def test_prompt_ids_are_the_processors(loaded: Loaded, turns: list[Turn]) -> None:
    images = IMAGES[: sum(t.image_count for t in turns)]
    processor = loaded.language.processor
    text = processor.apply_chat_template(
        messages(turns), tokenize=False, add_generation_prompt=True
    )
    expected = processor(
        text=[text], images=images or None, return_tensors="pt", images_kwargs={"size": SIZE}
    )["input_ids"]
    prompt = loaded.language.build_prompt(turns, [loaded.vision.encode(i) for i in images])
    assert torch.equal(prompt.input_ids, expected)
    image_id = loaded.language.image_token_id
    assert torch.equal(prompt.mm_token_type_ids, (expected == image_id).to(torch.int32))


def test_expand_image_ids_widens_each_placeholder() -> None:
    assert expand_image_ids([1, 9, 2, 9, 3], 9, [3, 1]) == [1, 9, 9, 9, 2, 9, 3]
    assert expand_image_ids([1, 2], 9, []) == [1, 2]
    with pytest.raises(UnsupportedModel):
        expand_image_ids([1, 9, 2], 9, [2, 2])


def test_patches_made_one_image_per_thread_are_the_processors(loaded: Loaded) -> None:
    """A processor that cannot be split (on CUDA) makes the images' patches one per
    thread: the same bytes, in the same order, as the processor's own batch (mixed sizes:
    different grids)."""
    vision = loaded.vision
    noise = Image.effect_noise((90, 70), 60).convert("RGB")
    images = [noise, *IMAGES, noise.transpose(Image.Transpose.ROTATE_90)]
    batch = vision.image_processor(images=images, size=vision.size, return_tensors="pt")
    pixels, grid = patches(vision.image_processor, images, vision.size, threads=3)
    assert torch.equal(grid, batch["image_grid_thw"])
    assert torch.equal(pixels, batch["pixel_values"])
    assert len({tuple(g.tolist()) for g in grid}) > 1
