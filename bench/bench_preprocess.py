"""The image processor's work for a batch of questions (Qwen2.5-VL's processor: resize,
rescale, normalise, patch), three ways in one process on the same images: the processor's
own batch on the host (``batch``), :func:`qwen_ui.engine.pipelines.patches` with one image
per thread on the host (``threads``), the engine's way with a CUDA model
(:func:`qwen_ui.engine.patching.device_patches`: resized on the host one image per thread,
the rest on the device; ``split``), and the processor wholly on the GPU (``cuda``, for
comparison; its patches differ from the host's).

    python bench/bench_preprocess.py                        # on the H200
    python bench/bench_preprocess.py --ways batch,threads,split   # CPU check

Prints one JSON object: per image count, the median milliseconds of each way (the patches
copied to the model's device, as the vision tower takes them), the ratio of ``batch`` to
each, and each way's largest difference from ``batch``'s patches.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from qwen_ui.engine.patching import device_patches
from qwen_ui.engine.pipelines import patch_threads, patches

MIN_PIXELS, MAX_PIXELS = 3136, 12845056  # Qwen2.5-VL's published processor limits


def images(count: int, size: tuple[int, int]) -> list[Image.Image]:
    """Distinct noise images of ``size``."""
    made = []
    for i in range(count):
        generator = torch.Generator().manual_seed(i)
        pixels = torch.randint(0, 256, (size[1], size[0], 3), generator=generator)
        made.append(Image.fromarray(pixels.to(torch.uint8).numpy()))
    return made


def timed(
    processor: Any, batch: list[Image.Image], way: str, target: str, args: argparse.Namespace
) -> Any:
    size = {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS}
    threads = args.threads if way in ("threads", "split") else 1
    reps = args.reps
    times, pixels = [], None
    for _ in range(reps + 1):
        start = time.perf_counter()
        if way == "split":
            pixels = device_patches(processor, batch, size, torch.device(target), threads)[0]
        elif way == "cuda":
            pixels = processor(images=batch, size=size, return_tensors="pt", device="cuda")[
                "pixel_values"
            ]
        else:
            pixels = patches(processor, batch, size, threads)[0]
        pixels = pixels.to(target)
        if target == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times[1:]), pixels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", default="1,8,16")
    parser.add_argument("--size", default="1024x768")
    parser.add_argument("--ways", default="batch,threads,split,cuda")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=patch_threads())  # the engine's
    args = parser.parse_args(argv)
    size = tuple(int(v) for v in args.size.split("x"))
    ways = args.ways.split(",")
    target = "cuda" if torch.cuda.is_available() else "cpu"
    processor = Qwen2VLImageProcessor()
    report: dict[str, Any] = {
        "command": " ".join(
            ["python bench/bench_preprocess.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "torch": torch.__version__,
        "host_cores": os.cpu_count(),
        "threads": args.threads,
    }
    for count in (int(c) for c in args.counts.split(",")):
        batch = images(count, (size[0], size[1]))
        row: dict[str, Any] = {}
        outputs = {}
        for way in ways:
            ms, outputs[way] = timed(processor, batch, way, target, args)
            row[f"{way}_ms"] = round(ms, 1)
        for way in ways[1:]:
            row[f"batch_over_{way}"] = round(row["batch_ms"] / row[f"{way}_ms"], 2)
            diff = (outputs[way].float() - outputs["batch"].float()).abs().max()
            row[f"{way}_max_abs_diff"] = round(float(diff), 4)
        report[f"{count}x{args.size}"] = row
    sys.stdout.write(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
