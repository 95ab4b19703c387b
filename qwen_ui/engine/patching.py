"""Image patches for a CUDA vision tower, split between the host and the device.

The processor turns a picture into a tensor, resizes it, rescales and normalises it to
float32 and cuts it into patches (each patch twice, the temporal axis); the float32
patches are four times the picture's bytes to copy to the device. Here the host does the
first two, in the processor's own methods (the resized picture, uint8), and the device
the rest, also in the processor's own methods: the same numbers as the processor's whole
pass (``tests/engine/test_patching.py`` compares them bit for bit; timings in
docs/BENCHMARKS.md, "Many users at once").

A processor without those methods (another image processor class) is not split:
:func:`splits` says so and the caller keeps the host's whole pass.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import torch
from PIL import Image
from transformers.image_utils import SizeDict

METHODS = ("process_image", "resize", "rescale_and_normalize", "patchify")
T = TypeVar("T")


def each_image(
    work: Callable[[Image.Image], T], images: Sequence[Image.Image], threads: int
) -> list[T]:
    """``work`` on every image, in order: in a pool of up to ``threads`` threads when there
    are several (the processor's work on one image has little parallelism inside)."""
    if threads <= 1 or len(images) <= 1:
        return [work(image) for image in images]
    with ThreadPoolExecutor(min(threads, len(images)), thread_name_prefix="patches") as pool:
        return list(pool.map(work, images))


def splits(image_processor: Any) -> bool:
    """Whether ``image_processor`` (a torchvision-based Qwen-VL one) can be split here."""
    return all(callable(getattr(image_processor, name, None)) for name in METHODS)


def resized_picture(
    image_processor: Any, image: Image.Image, *, size: dict[str, int]
) -> torch.Tensor:
    """The host's part: ``image`` as the processor resizes it, uint8 ``[1, C, H, W]``."""
    p = image_processor
    pixels = p.process_image(image, do_convert_rgb=p.do_convert_rgb)
    return p.resize(  # type: ignore[no-any-return]
        pixels[None],
        size=SizeDict(**size),
        resample=p.resample,
        factor=p.patch_size * p.merge_size,
    )


def patched(
    image_processor: Any, pictures: Sequence[torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The device's part: resized pictures (on the device) → ``(pixel_values,
    image_grid_thw)`` as the processor's whole pass gives them (the grid on the host)."""
    p = image_processor
    pixels, grids = [], []
    for picture in pictures:
        normal = p.rescale_and_normalize(
            picture, p.do_rescale, p.rescale_factor, p.do_normalize, p.image_mean, p.image_std
        )
        flat, grid_h, grid_w = p.patchify(normal, p.patch_size, p.merge_size, p.temporal_patch_size)
        pixels.append(flat[0])
        grids.append([1, grid_h, grid_w])
    joined = pixels[0] if len(pixels) == 1 else torch.cat(pixels)
    return joined, torch.tensor(grids, dtype=torch.long)


def device_patches(
    image_processor: Any,
    images: Sequence[Image.Image],
    size: dict[str, int],
    device: torch.device,
    threads: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``images``' patches on ``device``: resized on the host (up to ``threads`` at a
    time), copied as uint8, rescaled, normalised and cut on the device."""
    pictures = each_image(
        functools.partial(resized_picture, image_processor, size=size), images, threads
    )
    return patched(image_processor, [picture.to(device) for picture in pictures])
