"""Image token counts from the resize arithmetic equal what the real processor produces."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image
from transformers import AutoProcessor, Qwen2VLImageProcessor

from qwen_ui.admission.tokens import Geometry, image_grid, image_tokens, resized
from qwen_ui.engine.facts import geometry_of

DEMO = Path(__file__).resolve().parents[2] / "qwen_ui" / "demo" / "weights" / "bf16"
SIZES = [(1, 1), (28, 28), (57, 83), (224, 224), (640, 480), (1920, 1080), (300, 4000),
         (4000, 300), (1000, 999), (3000, 2000), (13, 700)]  # fmt: skip


def processed(image_processor: object, size: tuple[int, int], g: Geometry) -> tuple[int, ...]:
    image = Image.new("RGB", size, (10, 200, 30))
    bounds = {"shortest_edge": g.min_pixels, "longest_edge": g.max_pixels}
    out = image_processor(images=[image], size=bounds, return_tensors="pt")  # type: ignore[operator]
    t, h, w = (int(v) for v in out["image_grid_thw"][0].tolist())
    return t, h, w, int(out["pixel_values"].shape[0])


@pytest.mark.parametrize(("min_pixels", "max_pixels"), [(3136, 1_003_520), (3136, 112 * 112)])
def test_counts_match_the_demo_processor(min_pixels: int, max_pixels: int) -> None:
    processor = AutoProcessor.from_pretrained(DEMO, local_files_only=True)
    g = geometry_of(processor.image_processor, min_pixels, max_pixels)
    assert (g.patch_size, g.merge_size, g.temporal_patch_size) == (14, 2, 2)
    for size in SIZES:
        t, h, w, patches = processed(processor.image_processor, size, g)
        grid = image_grid(*size, g)
        assert (grid.t, grid.h, grid.w) == (t, h, w), size
        assert grid.patches == patches and image_tokens(*size, g) == patches // 4


def test_counts_follow_other_patch_and_merge_sizes() -> None:
    image_processor = Qwen2VLImageProcessor(patch_size=16, merge_size=1, temporal_patch_size=2)
    g = geometry_of(image_processor, 32 * 32, 640 * 640)
    assert g.factor == 16
    for size in SIZES:
        t, h, w, patches = processed(image_processor, size, g)
        grid = image_grid(*size, g)
        assert (grid.t, grid.h, grid.w) == (t, h, w) and grid.tokens == patches


def test_the_published_arithmetic() -> None:
    g = Geometry(14, 2, 2, 3136, 12_845_056)
    assert image_tokens(1920, 1080, g) == 2691  # one token per 28x28 px after resizing
    assert image_tokens(28, 28, g) == 4  # min_pixels lifts it to 56×56
    assert resized(20_000, 20_000, g) == (3556, 3556)  # floored under max_pixels
    assert image_tokens(20_000, 20_000, g) == 127 * 127 <= 16_384
    lower = g.with_max_pixels(1000)
    assert lower.max_pixels == 3136  # never below min_pixels


def test_extreme_aspect_ratio_is_refused_like_the_processor() -> None:
    with pytest.raises(ValueError, match="aspect ratio"):
        image_tokens(10, 2500, Geometry(14, 2, 2, 3136, 1_003_520))
