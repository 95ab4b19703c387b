"""Patches split between the host and the device (``qwen_ui.engine.patching``): the same
numbers as the processor's whole pass, here with the CPU standing in for the device."""

from __future__ import annotations

import pytest
import torch
from PIL import Image
from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor

from qwen_ui.engine import patching

CPU = torch.device("cpu")


def pictures() -> list[Image.Image]:
    """Noise (the resize's worst case) of several sizes and modes, one of them grey."""
    noise = Image.effect_noise((300, 200), 80)
    return [
        noise.convert("RGB"),
        noise,  # mode "L": the processor converts it to RGB
        noise.resize((1024, 768)).convert("RGB"),
        Image.new("RGBA", (90, 160), (10, 200, 30, 128)),
    ]


@pytest.mark.parametrize(
    ("patch", "low", "high"), [(14, 3136, 1003520), (16, 65536, 16777216)], ids=["2.5", "3"]
)
@pytest.mark.parametrize("threads", [1, 3])
def test_split_patches_are_the_processors_bit_for_bit(
    patch: int, low: int, high: int, threads: int
) -> None:
    """Qwen2.5-VL's processor and Qwen3-VL's sizes (16-pixel patches): pixels and grids
    equal to the processor's own batch, in order."""
    processor = Qwen2VLImageProcessor(patch_size=patch)
    size = {"shortest_edge": low, "longest_edge": high}
    images = pictures()
    whole = processor(images=images, size=size, return_tensors="pt")
    assert patching.splits(processor)
    pixels, grid = patching.device_patches(processor, images, size, CPU, threads)
    assert torch.equal(grid, whole["image_grid_thw"])
    assert pixels.dtype == whole["pixel_values"].dtype
    assert torch.equal(pixels, whole["pixel_values"])


def test_a_processor_without_the_methods_is_not_split() -> None:
    class Plain:
        def __call__(self, **kwargs: object) -> None: ...

    assert not patching.splits(Plain())


@pytest.mark.gpu
def test_patches_made_on_the_gpu_are_the_hosts() -> None:
    """The device's part on CUDA: the same numbers as the processor's pass on the host."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    processor = Qwen2VLImageProcessor()
    size = {"shortest_edge": 3136, "longest_edge": 1003520}
    images = pictures()
    whole = processor(images=images, size=size, return_tensors="pt")
    pixels, grid = patching.device_patches(processor, images, size, torch.device("cuda"), 4)
    assert pixels.is_cuda
    assert torch.equal(grid, whole["image_grid_thw"])
    assert torch.equal(pixels.cpu(), whole["pixel_values"])
