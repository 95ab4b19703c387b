"""Image token counts from the processor's resize arithmetic, before any encoding.

Qwen2-VL/2.5-VL processors resize every image with ``smart_resize`` (sides rounded to
multiples of ``patch_size * merge_size``, pixel count clamped to ``[min_pixels,
max_pixels]``), cut it into ``patch_size`` patches (each frame repeated
``temporal_patch_size`` times for still images) and merge ``merge_size``² patches into one
language-model token. The functions here repeat that arithmetic with transformers' own
``smart_resize`` so the counts are the processor's, not an approximation.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

from qwen_ui.engine.shapes import Geometry


@dataclass(frozen=True)
class ImageGrid:
    """An image as the vision tower sees it: ``t × h × w`` patches, ``tokens`` merged."""

    t: int
    h: int
    w: int
    merge_size: int
    source_pixels: int = 0  # width × height before the resize

    @property
    def patches(self) -> int:
        return self.t * self.h * self.w

    @property
    def tokens(self) -> int:
        return self.patches // (self.merge_size * self.merge_size)


def resized(width: int, height: int, geometry: Geometry) -> tuple[int, int]:
    """(width, height) after the processor's resize; ValueError for aspect ratios > 200."""
    h, w = smart_resize(
        height,
        width,
        factor=geometry.factor,
        min_pixels=geometry.min_pixels,
        max_pixels=geometry.max_pixels,
    )
    return int(w), int(h)


def image_grid(width: int, height: int, geometry: Geometry) -> ImageGrid:
    w, h = resized(width, height, geometry)
    p = geometry.patch_size
    return ImageGrid(1, h // p, w // p, geometry.merge_size, width * height)


def image_tokens(width: int, height: int, geometry: Geometry) -> int:
    return image_grid(width, height, geometry).tokens
