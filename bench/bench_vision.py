"""The vision tower's forward, stock per-window attention loop vs ``qwen_ui.engine.vision``'s
batched attention, in one process on the same random weights and pixels.

    python bench/bench_vision.py --arch 7b --device cuda            # the H200
    python bench/bench_vision.py --arch 7b --depth 4 --device cpu   # a CPU check

Prints one JSON object: per image set, the median milliseconds of each path, their ratio
and the largest difference between the two outputs. ``--compiled`` adds a third path:
the batched attention with each block's norms and MLP compiled by Inductor (dynamic
shapes); ``--profile`` adds the batched path's kernels by category (``torch.profiler``,
one forward), to see where the tower's time goes. ``--padded`` adds the engine's CUDA
path: the batched attention with the MLPs padded to whole 16-byte rows
(``vision.pad_mlps``, on a copy of the tower). ``--novel N`` times the engine's batched
tower on images of sizes it has not seen (N of them, drawn at random), each once as it
comes and once again, with cuDNN's attention allowed (torch's default) and then with it
turned off (``torch.backends.cuda.enable_cudnn_sdp(False)``), each on sizes of its own:
cuDNN builds an execution plan on the host for every new shape, which a bench of one
size never shows, while every user's image brings new lengths. The grid of each image
follows the processor's resize (``smart_resize``, 14 px patches, 2x2 merge, the
published pixel limits).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import random
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _checkpoints import model_config
from _profiling import activities, device_events, summarise

from qwen_ui.engine import vision

MIN_PIXELS, MAX_PIXELS = 3136, 12845056  # Qwen2.5-VL's published processor limits
SETS = {
    "1x1024x768": [(1024, 768)],
    "3x1024x768": [(1024, 768)] * 3,
    "8x1024x768": [(1024, 768)] * 8,
    "1x448x448": [(448, 448)],
}


def grid_of(width: int, height: int) -> tuple[int, int, int]:
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    h, w = smart_resize(height, width, factor=28, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
    return (1, h // 14, w // 14)


def tower(arch: str, depth: int | None, device: torch.device, dtype: torch.dtype) -> Any:
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (
        Qwen2_5_VisionTransformerPretrainedModel,
    )

    config = model_config(arch, None, depth).vision_config
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = Qwen2_5_VisionTransformerPretrainedModel._from_config(config, dtype=dtype)
    return model.to(device).eval()


def timed(fn: Any, device: torch.device, reps: int, warmup: int) -> tuple[float, torch.Tensor]:
    out = fn()
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        _sync(device)
        t0 = time.perf_counter()
        out = fn()
        _sync(device)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def patches_for(grid: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Random flattened patches (3 channels x 2 frames x 14 x 14 each) for ``grid``'s
    images, on its device."""
    count = int(grid.prod(-1).sum())
    return torch.randn(count, 3 * 2 * 14 * 14, device=grid.device, dtype=dtype)


def measure(
    model: Any, padded: Any | None, sizes: list[tuple[int, int]], args: argparse.Namespace
) -> dict[str, Any]:
    grid = torch.tensor([grid_of(w, h) for w, h in sizes], device=args.device)
    pixels = patches_for(grid, model.dtype)
    holder = _Holder(model)

    def forward() -> torch.Tensor:
        with torch.inference_mode():
            return model(pixels, grid_thw=grid).pooler_output  # type: ignore[no-any-return]

    vision.uninstall(holder)
    stock_ms, stock = timed(forward, args.device, args.reps, args.warmup)
    vision.install(holder)
    batched_ms, batched = timed(forward, args.device, args.reps, args.warmup)
    result: dict[str, Any] = {
        "patches": int(pixels.shape[0]),
        "stock_ms": round(stock_ms, 2),
        "batched_ms": round(batched_ms, 2),
        "speedup": round(stock_ms / batched_ms, 2),
        "max_abs_diff": float((stock.float() - batched.float()).abs().max()),
        "output_abs_max": float(stock.float().abs().max()),
    }
    if args.profile:
        result["batched_profile"] = profiled(forward, args.device)
    if args.compiled:
        with compiled_parts(model):
            compiled_ms, compiled = timed(forward, args.device, args.reps, args.warmup)
            if args.profile:
                result["compiled_profile"] = profiled(forward, args.device)
        result["compiled_ms"] = round(compiled_ms, 2)
        result["compiled_speedup"] = round(batched_ms / compiled_ms, 2)
        result["compiled_max_abs_diff"] = float((stock.float() - compiled.float()).abs().max())
    vision.uninstall(holder)
    if padded is not None:
        result |= measure_padded(padded, grid, pixels, stock, batched_ms, args)
    return result


def measure_padded(
    padded: Any,
    grid: torch.Tensor,
    pixels: torch.Tensor,
    stock: torch.Tensor,
    batched_ms: float,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """The batched attention on the tower whose MLPs :func:`vision.pad_mlps` widened."""

    def forward() -> torch.Tensor:
        with torch.inference_mode():
            return padded(pixels, grid_thw=grid).pooler_output  # type: ignore[no-any-return]

    padded_ms, out = timed(forward, args.device, args.reps, args.warmup)
    result: dict[str, Any] = {
        "padded_ms": round(padded_ms, 2),
        "padded_speedup": round(batched_ms / padded_ms, 2),
        "padded_max_abs_diff": float((stock.float() - out.float()).abs().max()),
    }
    if args.profile:
        result["padded_profile"] = profiled(forward, args.device)
    return result


def novel_sizes(count: int, seed: int) -> list[tuple[int, int]]:
    """``count`` (width, height) pairs of distinct resized grids, 320 to 1600 px a side."""
    rng = random.Random(seed)
    sizes: dict[tuple[int, int, int], tuple[int, int]] = {}
    seen = {grid_of(1024, 768)}  # the warm-up's
    while len(sizes) < count:
        size = (rng.randint(320, 1600), rng.randint(320, 1600))
        if grid_of(*size) not in seen:
            sizes.setdefault(grid_of(*size), size)
    return list(sizes.values())


def measure_novel(model: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The batched tower on ``--novel`` unseen image sizes, first and second call each,
    with cuDNN's attention on (torch's default) and then off, on disjoint sizes."""
    holder = _Holder(model)
    vision.install(holder)
    drawn = novel_sizes(2 * args.novel, seed=7)
    original = torch.backends.cuda.cudnn_sdp_enabled()
    result: dict[str, Any] = {}
    try:
        for on in (True, False):  # the process's first calls, on a size neither set has
            torch.backends.cuda.enable_cudnn_sdp(on)
            first_and_again(model, (1024, 768), args.device)
        for name, on, sizes in (("cudnn", True, drawn[::2]), ("no_cudnn", False, drawn[1::2])):
            torch.backends.cuda.enable_cudnn_sdp(on)
            rows = [first_and_again(model, size, args.device) for size in sizes]
            result[name] = {
                "first_ms_median": round(statistics.median(r["first_ms"] for r in rows), 2),
                "again_ms_median": round(statistics.median(r["again_ms"] for r in rows), 2),
                "first_ms_total": round(sum(r["first_ms"] for r in rows), 1),
                "again_ms_total": round(sum(r["again_ms"] for r in rows), 1),
                "sizes": rows,
            }
    finally:
        torch.backends.cuda.enable_cudnn_sdp(original)
    vision.uninstall(holder)
    return result


def first_and_again(model: Any, size: tuple[int, int], device: torch.device) -> dict[str, Any]:
    """Milliseconds of the tower's forward on one image of ``size``, twice."""
    grid = torch.tensor([grid_of(*size)], device=device)
    pixels = patches_for(grid, model.dtype)
    times = []
    for _ in range(2):
        _sync(device)
        t0 = time.perf_counter()
        with torch.inference_mode():
            model(pixels, grid_thw=grid)
        _sync(device)
        times.append(round((time.perf_counter() - t0) * 1000, 2))
    return {
        "size": list(size),
        "patches": int(pixels.shape[0]),
        "first_ms": times[0],
        "again_ms": times[1],
    }


def profiled(forward: Any, device: torch.device) -> dict[str, Any]:
    """One forward's kernels (operators on the CPU) by category."""
    with torch.profiler.profile(activities=activities(device)) as prof:
        forward()
        _sync(device)
    return summarise(device_events(prof, device), 1)


@contextlib.contextmanager
def compiled_parts(model: Any) -> Iterator[None]:
    """Each block's norms and MLP compiled (dynamic shapes) while the block runs; their
    plain forwards back after."""
    parts = [part for block in model.blocks for part in (block.norm1, block.norm2, block.mlp)]
    plain = [part.forward for part in parts]
    try:
        for part in parts:
            part.forward = torch.compile(part.forward, dynamic=True)
        yield
    finally:
        for part, forward in zip(parts, plain, strict=True):
            part.forward = forward


class _Holder:
    """What :func:`vision.install` expects around a bare vision tower."""

    def __init__(self, tower: Any) -> None:
        self.model = type("Inner", (), {"visual": tower})()
        self.config = tower.config


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--arch", default="7b", choices=["7b", "3b", "tiny"])
    p.add_argument("--depth", type=int, default=None, help="fewer vision blocks (CPU checks)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--sets", default=",".join(SETS), help="comma-separated: " + ", ".join(SETS))
    p.add_argument("--compiled", action="store_true", help="also norms and MLPs compiled")
    p.add_argument("--profile", action="store_true", help="kernels by category, one forward")
    p.add_argument("--padded", action="store_true", help="also the MLPs padded (engine, CUDA)")
    p.add_argument(
        "--novel", type=int, default=0, help="unseen image sizes timed with cuDNN on and off"
    )
    args = p.parse_args(argv)
    args.device = torch.device(args.device)
    return args


def run(args: argparse.Namespace) -> dict[str, Any]:
    dtype = torch.bfloat16 if args.device.type == "cuda" else torch.float32
    model = tower(args.arch, args.depth, args.device, dtype)
    result: dict[str, Any] = {"arch": args.arch, "depth": model.config.depth}
    result |= {"device": str(args.device), "dtype": str(dtype), "reps": args.reps}
    padded = copy.deepcopy(model) if args.padded else None
    if padded is not None:
        holder = _Holder(padded)
        result["padded_mlps"] = vision.pad_mlps(holder)
        vision.install(holder)
    if args.novel:  # before any other size is seen
        result["novel"] = measure_novel(model, args)
    for name in filter(None, args.sets.split(",")):
        result[name] = measure(model, padded, SETS[name], args)
    return result


def main(argv: list[str] | None = None) -> int:
    print(json.dumps(run(parse(argv)), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
