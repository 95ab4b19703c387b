"""A request's memory shape (images to encode, prompt tokens, new tokens) from the
engine's :class:`~qwen_ui.engine.shapes.AskShape`, and the search for the largest
per-request ``max_pixels`` that makes it fit a budget."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from qwen_ui.admission.errors import ImageAspect
from qwen_ui.admission.estimate import Estimate, RequestShape, estimate
from qwen_ui.admission.tokens import ImageGrid, image_grid, resized
from qwen_ui.engine.shapes import AskShape, Geometry, ModelFacts, Size


@dataclass(frozen=True)
class Sized:
    shape: RequestShape
    estimate: Estimate
    new_grids: Sequence[ImageGrid]

    @property
    def image_tokens(self) -> int:
        return self.shape.image_tokens


def grids(sizes: Sequence[Size], geometry: Geometry, first_index: int = 1) -> list[ImageGrid]:
    out = []
    for i, (width, height) in enumerate(sizes, start=first_index):
        try:
            out.append(image_grid(width, height, geometry))
        except ValueError as exc:  # smart_resize refuses aspect ratios over 200
            raise ImageAspect(index=i, width=width, height=height) from exc
    return out


def size_request(facts: ModelFacts, ask: AskShape, geometry: Geometry | None = None) -> Sized:
    """The request's shape with its new images resized by ``geometry`` (default: the
    server's). Earlier turns' images keep the server's geometry."""
    new = grids(ask.new_sizes, geometry or facts.geometry)
    every = grids(ask.past_sizes, facts.geometry) + new
    shape = RequestShape(
        encode=every,
        image_tokens=sum(g.tokens for g in every),
        text_tokens=ask.text_tokens,
        max_new_tokens=ask.max_new_tokens,
    )
    return Sized(shape, estimate(shape, facts.shape), new)


def largest_fitting_max_pixels(facts: ModelFacts, ask: AskShape, budget: int) -> int | None:
    """The largest ``max_pixels`` for the new images (a multiple of the merged patch area,
    at least ``min_pixels``) with which the request fits ``budget``; None if none does."""
    geometry = facts.geometry
    unit = geometry.factor * geometry.factor
    low = max(1, -(-geometry.min_pixels // unit))
    high = max(low, geometry.max_pixels // unit)

    def fits(units: int) -> bool:
        g = geometry.with_max_pixels(units * unit)
        return size_request(facts, ask, g).estimate.total <= budget

    if not fits(low):
        return None
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low * unit


def downscaled_size(size: Size, geometry: Geometry, max_pixels: int) -> Size:
    """What the processor would resize ``size`` to with a lower ``max_pixels``."""
    return resized(size[0], size[1], geometry.with_max_pixels(max_pixels))
