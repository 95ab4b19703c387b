"""Shared by the ``bench/profile_*.py`` scripts: ``torch.profiler`` events summed by kernel
category (CUDA kernels, or CPU operators' self time), with no imports beyond torch, so that
the training profile runs on the device's own packages."""

from __future__ import annotations

import argparse
import logging
import sys
from collections import defaultdict
from typing import Any

import torch

# kernel or operator name fragments (lower case) -> category, first match wins
CATEGORIES = (
    ("int4 matmul", ("int4", "tinygemm")),
    # the prefill's dequantize: Inductor's kernel (int4 nibbles shifted and masked) or the
    # Triton unpacking (engine/tinygemm_unpack.py); "bitwise" alone also names the decode
    # attention's masked softmax
    ("dequantize", ("rshift", "unpack_tiles")),
    ("attention", ("flash", "attention", "fmha", "sdpa", "softmax")),
    ("bf16 matmul", ("gemv", "gemm", "matmul", "cublas", "cutlass", "nvjet", "mm")),
    ("copies", ("copy", "memcpy", "memset", "cat")),
    ("fused elementwise (inductor)", ("triton",)),
    ("norm, rope, activations", ("norm", "rsqrt", "mul", "add", "silu", "pow", "mean", "neg")),
)


def provenance(script: str, argv: list[str] | None, device: torch.device) -> dict[str, str]:
    """The command that made a result (``SCRIPT``, a path from the repository root, and its
    arguments) and the device it ran on: the first keys of a benchmark's JSON."""
    args = sys.argv[1:] if argv is None else argv
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"command": " ".join(["python", script, *args]), "device": name}


def activities(device: torch.device) -> list[Any]:
    """What ``torch.profiler.profile`` records: the host's operators, and the device's
    kernels on CUDA."""
    from torch.profiler import ProfilerActivity

    cuda = [ProfilerActivity.CUDA] if device.type == "cuda" else []
    return [ProfilerActivity.CPU, *cuda]


def category(name: str) -> str:
    lower = name.lower()
    for label, fragments in CATEGORIES:
        if any(f in lower for f in fragments):
            return label
    return "other"


def device_events(prof: Any, device: torch.device) -> list[tuple[str, float, int]]:
    """(name, microseconds, calls) of the kernels (CUDA) or operator self times (CPU)."""
    if device.type == "cuda":
        return [
            (e.name, e.device_time, 1)
            for e in prof.events()
            if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA
        ]
    return [(e.key, e.self_cpu_time_total, e.count) for e in prof.key_averages()]


def summarise(events: list[tuple[str, float, int]], steps: int) -> dict[str, Any]:
    by_cat: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for name, us, calls in events:
        for table, key in ((by_cat, category(name)), (by_name, name)):
            table[key][0] += us
            table[key][1] += calls
    total = sum(us for _, us, _ in events) or 1.0
    cats = {
        k: {
            "us_per_step": round(v[0] / steps, 1),
            "calls_per_step": round(v[1] / steps, 1),
            "share": round(v[0] / total, 3),
        }
        for k, v in sorted(by_cat.items(), key=lambda kv: -kv[1][0])
    }
    top = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:15]
    return {
        "device_us_per_step": round(total / steps, 1),
        "calls_per_step": round(sum(v[1] for v in by_cat.values()) / steps, 1),
        "by_category": cats,
        "top_kernels": [
            {"name": n[:120], "us_per_step": round(v[0] / steps, 1), "calls_per_step": v[1] / steps}
            for n, v in top
        ],
    }


def profile_parser(doc: str | None) -> argparse.ArgumentParser:
    """The profile scripts' parser with ``--device`` (CUDA when present), and their logging:
    INFO on stderr (stdout carries the JSON), transformers' own messages only as errors."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    p = argparse.ArgumentParser(description=(doc or "").split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return p
