"""Torch's int4 kernel (``_weight_int4pack_mm``) at each inner k-tiling, for a few rows.

The engine packs every int4 weight with the largest tiling its inner dimension allows
(``awq.inner_k_tiles``: 8 for the 7B's layers). The tiling sets how the kernel splits
the inner dimension over warps, so one row may run faster at another. Per shape of the
7B decoder (as the engine fuses them) and row count, microseconds per call at tilings
2, 4 and 8, replayed from one CUDA graph that cycles through enough copies of the weight
to exceed the L2 cache (a decode step reads each layer's weight once, from HBM). Prints
one JSON document on stdout.

    python bench/bench_int4_tiles.py            # on the GPU
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from _profiling import provenance
from bench_int4_triton import SHAPES_7B

from qwen_ui.engine.awq import KERNEL_DTYPE, pack_for_cuda

GROUP = 128
L2_BYTES = 60 * 2**20  # the H200's L2 is 50 MiB: cycle through more than this


def per_call_us(calls: list[Any], reps: int) -> float:
    """Microseconds per call of ``calls`` (each once per round, ``reps`` rounds) replayed
    from one CUDA graph."""
    for call in calls:
        call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            for call in calls:
                call()
    graph.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    graph.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / (reps * len(calls)) * 1e6


def one_shape(n: int, k: int, rows: list[int], reps: int) -> dict[str, Any]:
    """Torch's kernel at each tiling for one ``[n, k]`` weight: microseconds per call and
    the largest difference from tiling 8's output (the same weight, so it should be 0)."""
    gen = torch.Generator(device="cpu").manual_seed(n * 7 + k)
    copies = max(2, -(-L2_BYTES // (n * k // 2)))
    qs = [
        torch.randint(0, 16, (n, k), generator=gen, dtype=torch.int32).cuda() for _ in range(copies)
    ]
    scales = torch.rand(k // GROUP, n, generator=gen) * 0.02 + 0.001
    zeros = (8.0 - torch.randint(0, 16, (k // GROUP, n), generator=gen)) * scales
    sz = torch.stack([scales, zeros], dim=-1).to(KERNEL_DTYPE).cuda().contiguous()
    xs = {m: torch.randn(m, k, generator=gen).to(device="cuda", dtype=KERNEL_DTYPE) for m in rows}
    out: dict[str, Any] = {"copies": copies}
    products: dict[tuple[int, int], torch.Tensor] = {}  # (tiling, rows): the first copy's
    for tiles in (2, 4, 8):
        if k % (16 * tiles):
            continue
        packed = [pack_for_cuda(q, tiles) for q in qs]
        entry: dict[str, Any] = {}
        for m in rows:
            x = xs[m]
            calls = [lambda p=p, x=x: torch._weight_int4pack_mm(x, p, GROUP, sz) for p in packed]
            entry[str(m)] = {"us": round(per_call_us(calls, reps), 2)}
            products[tiles, m] = calls[0]().float()
        out[str(tiles)] = entry
        del packed
    for (tiles, m), product in products.items():  # the tilings must agree on the product
        diff = (product - products[8, m]).abs().max()
        out[str(tiles)][str(m)]["max_diff_vs_8"] = float(diff)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,8,16", help="comma-separated row counts")
    parser.add_argument("--reps", type=int, default=20, help="rounds per CUDA graph")
    args = parser.parse_args(argv)
    rows = [int(r) for r in args.rows.split(",")]
    result: dict[str, Any] = {
        **provenance("bench/bench_int4_tiles.py", argv, torch.device("cuda")),
        "shapes": {},
    }
    for name, (n, k) in SHAPES_7B.items():
        result["shapes"][name] = one_shape(n, k, rows, args.reps)
    step: dict[str, dict[str, float]] = {}
    for tiles in ("2", "4", "8"):
        for m in rows:
            total = sum(
                28 * s[tiles][str(m)]["us"] for s in result["shapes"].values() if tiles in s
            )
            step.setdefault(tiles, {})[str(m)] = round(total, 1)
    result["step_us_28_layers"] = step
    json.dump(result, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
