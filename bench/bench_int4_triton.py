"""A Triton int4 x bf16 matmul for a few rows, timed against torch's int4 kernel.

The batched decode step's time grows with its rows mostly in torch's int4 kernel
(``_weight_int4pack_mm``, docs/BENCHMARKS.md, "Many users at once"): over the 7B step's
112 int4 layers it took 2.42 ms at 1 row and 5.04 at 8, where reading the 4-bit weights
once takes well under a millisecond on the H200. This kernel reads each weight once per
call for up to 16 rows: the output columns are split over programs (and the inner
dimension over ``split_k`` of them, added atomically), each unpacking its block's nibbles
(each packed word loaded once and spread by a reshape, or loaded once per column:
``--gather``) and multiplying with ``tl.dot`` in float32: the raw nibbles, each group's
scale and zero applied to the product (``W = q s + (z' - 8 s)``, so the row sums of ``x``
carry the zeros), or the block dequantized first (``--before``).

Weight layout (:func:`pack`): int32 ``[n, k / 8]``, nibble ``j`` of word ``w`` holding
column ``8 w + j`` of row ``n`` (values 0..15); ``scales_and_zeros[k / g, n, 2]`` as torch's
kernel takes it, ``W[n, k] = (q - 8) * s + z'``.

    python bench/bench_int4_triton.py                      # on the GPU
    TRITON_INTERPRET=1 python bench/bench_int4_triton.py --device cpu --shapes 64x512 \\
        --rows 1,3 --iters 1                                # CPU dry run (interpreter)

Per shape (the 7B architecture's fused q/k/v, o, gate/up and down by default) and row
count: microseconds per call of each kernel, replayed from a CUDA graph (with ``--sweep``, of
every block size and split of the inner dimension, the fastest kept), and the largest
difference from the dequantized reference, relative to the output's largest value; then
the sum over a step's 28 layers of each shape. Prints one JSON document on stdout.
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
import triton
import triton.language as tl
from _profiling import provenance

from qwen_ui.engine.awq import KERNEL_DTYPE, inner_k_tiles, pack_for_cuda

# (out, in) of the Qwen2.5-VL-7B decoder's int4 layers, as the engine fuses them
SHAPES_7B = {
    "qkv": (4608, 3584),
    "o": (3584, 3584),
    "gate_up": (37888, 3584),
    "down": (3584, 18944),
}
LAYERS = 28


@triton.jit
def _int4_mm(
    x_ptr,
    w_ptr,
    sz_ptr,
    out_ptr,
    m,
    n,
    k,
    group: tl.constexpr,
    k_per_split,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    ONCE: tl.constexpr,
    AFTER: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows = tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    inner = tl.arange(0, BLOCK_K)
    shifts = (inner % 8) * 4
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    start = pid_k * k_per_split
    for k0 in range(start, start + k_per_split, BLOCK_K):
        ks = k0 + inner
        x = tl.load(x_ptr + rows[:, None] * k + ks[None, :], mask=rows[:, None] < m, other=0.0)
        if ONCE:  # each word loaded once, its 8 nibbles spread by a reshape
            words = tl.load(
                w_ptr + cols[:, None] * (k // 8) + (k0 // 8 + tl.arange(0, BLOCK_K // 8))[None, :],
                mask=cols[:, None] < n,
            )
            nibbles = (words[:, :, None] >> (tl.arange(0, 8) * 4)[None, None, :]) & 0xF
            q = tl.reshape(nibbles, (BLOCK_N, BLOCK_K))
        else:  # each column's word loaded where it is needed (8 loads of one word)
            words = tl.load(
                w_ptr + cols[:, None] * (k // 8) + (ks // 8)[None, :], mask=cols[:, None] < n
            )
            q = (words >> shifts[None, :]) & 0xF
        g = k0 // group
        s = tl.load(sz_ptr + (g * n + cols) * 2, mask=cols < n).to(tl.float32)
        z = tl.load(sz_ptr + (g * n + cols) * 2 + 1, mask=cols < n).to(tl.float32)
        if AFTER:  # W = q s + (z' - 8 s): the nibbles multiplied as they are, scaled after
            part = tl.dot(x, tl.trans(q.to(x.dtype)))
            total = tl.sum(x.to(tl.float32), axis=1)
            acc += part * s[None, :] + total[:, None] * (z - 8.0 * s)[None, :]
        else:  # the block dequantized to x's dtype first
            w = ((q.to(tl.float32) - 8.0) * s[:, None] + z[:, None]).to(x.dtype)
            acc += tl.dot(x, tl.trans(w))
    mask = (rows[:, None] < m) & (cols[None, :] < n)
    tl.atomic_add(out_ptr + rows[:, None] * n + cols[None, :], acc, mask=mask)


def pack(q: torch.Tensor) -> torch.Tensor:
    """int32 ``[n, k]`` of values 0..15 → int32 ``[n, k / 8]``, column ``8 w + j`` in
    nibble ``j`` of word ``w``."""
    n, k = q.shape
    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=q.device)
    return (q.view(n, k // 8, 8) << shifts).sum(-1, dtype=torch.int32)


def int4_mm(
    x: torch.Tensor,
    packed: torch.Tensor,
    scales_and_zeros: torch.Tensor,
    group: int,
    split_k: int = 4,
    block_n: int = 64,
    block_k: int = 128,
    once: bool = True,
    after: bool = True,
) -> torch.Tensor:
    """``x @ W.T`` for ``x`` ``[m, k]`` (m at most 16), ``W`` from :func:`pack`'s layout;
    ``once``: each packed word loaded once and spread by a reshape, else once per column;
    ``after``: the raw nibbles multiplied and each group's scale and zero applied to the
    product, else the block dequantized before its product."""
    m, k = x.shape
    n = packed.shape[0]
    if m > 16 or group % block_k or k % (split_k * block_k):
        raise ValueError(f"unsupported shape: m={m}, k={k}, group={group}, split_k={split_k}")
    out = torch.zeros(m, n, device=x.device, dtype=torch.float32)
    grid = (triton.cdiv(n, block_n), split_k)
    _int4_mm[grid](
        x.contiguous(),
        packed,
        scales_and_zeros,
        out,
        m,
        n,
        k,
        group,
        k // split_k,
        BLOCK_M=16,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        ONCE=once,
        AFTER=after,
    )
    return out.to(x.dtype)


def reference(q: torch.Tensor, scales_and_zeros: torch.Tensor, group: int) -> torch.Tensor:
    """``W`` ``[n, k]`` in float32: ``(q - 8) * s + z'`` per group."""
    sz = scales_and_zeros.float().repeat_interleave(group, dim=0)  # [k, n, 2]
    return (q.float() - 8.0) * sz[..., 0].t() + sz[..., 1].t()


def timed(fn: Any, iters: int, device: torch.device) -> float:
    """Microseconds per call after two warm-up calls: on CUDA, ``iters`` calls recorded in
    one CUDA graph and replayed (the device's time, without Python's launches, as the
    engine's recorded step runs them); elsewhere, calls queued back to back."""
    for _ in range(2):
        fn()
    sync(device)
    if device.type != "cuda":
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t0) / iters * 1e6
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(iters):
            fn()
    graph.replay()
    sync(device)
    t0 = time.perf_counter()
    graph.replay()
    sync(device)
    return (time.perf_counter() - t0) / iters * 1e6


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def one_shape(
    n: int, k: int, rows: list[int], args: argparse.Namespace, device: torch.device
) -> dict[str, Any]:
    """Both kernels at every row count for one ``[n, k]`` weight."""
    gen = torch.Generator(device="cpu").manual_seed(n * 7 + k)
    q = torch.randint(0, 16, (n, k), generator=gen, dtype=torch.int32).to(device)
    scales = torch.rand(k // args.group, n, generator=gen) * 0.02 + 0.001
    zeros = (8.0 - torch.randint(0, 16, (k // args.group, n), generator=gen)) * scales
    sz = torch.stack([scales, zeros], dim=-1).to(KERNEL_DTYPE).to(device).contiguous()
    packed = pack(q)
    weight = reference(q, sz, args.group)
    torch_packed = pack_for_cuda(q, inner_k_tiles(k)) if device.type == "cuda" else None
    out: dict[str, Any] = {}
    for m in rows:
        x = torch.randn(m, k, generator=gen).to(device=device, dtype=args.dtype)
        want = x.float() @ weight.t()
        scale = float(want.abs().max())
        entry: dict[str, Any] = {"configs": {}}
        for config in configs(k, args):
            got = int4_mm(x, packed, sz, args.group, *config)
            us = timed(
                lambda x=x, c=config: int4_mm(x, packed, sz, args.group, *c), args.iters, device
            )
            split_k, block_n, block_k, once, after = config
            unpack = "once" if once else "gather"
            name = f"split{split_k}-n{block_n}-k{block_k}-{unpack}-{'after' if after else 'before'}"
            entry["configs"][name] = {
                "us": round(us, 1),
                "max_rel_diff": round(float((got.float() - want).abs().max()) / scale, 5),
            }
        best = min(entry["configs"], key=lambda c: entry["configs"][c]["us"])
        entry["best"] = best
        entry["triton_us"] = entry["configs"][best]["us"]
        entry["max_rel_diff"] = max(c["max_rel_diff"] for c in entry["configs"].values())
        if torch_packed is not None:
            flat = x.to(KERNEL_DTYPE)
            stock = torch._weight_int4pack_mm(flat, torch_packed, args.group, sz)
            entry["torch_max_rel_diff"] = round(
                float((stock.float() - want).abs().max()) / scale, 5
            )
            entry["torch_us"] = round(
                timed(
                    lambda flat=flat: torch._weight_int4pack_mm(flat, torch_packed, args.group, sz),
                    args.iters,
                    device,
                ),
                1,
            )
        out[str(m)] = entry
    return out


def configs(k: int, args: argparse.Namespace) -> list[tuple[int, int, int, bool, bool]]:
    """(split_k, block_n, block_k, once, after) to try: the options' own, or with
    ``--sweep`` every combination that divides ``k`` and the group, each word loaded once,
    scaled before and after the product."""
    if not args.sweep:
        return [(args.split_k, args.block_n, args.block_k, not args.gather, not args.before)]
    return [
        (split_k, block_n, block_k, True, after)
        for after in (True, False)
        for block_k in (64, 128)
        for block_n in (32, 64, 128, 256)
        for split_k in (1, 2, 4, 7, 8, 14)
        if args.group % block_k == 0 and k % (split_k * block_k) == 0
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--shapes", default="", help="NxK,... (default: the 7B decoder's four)")
    p.add_argument("--rows", default="1,2,4,8,16")
    p.add_argument("--group", type=int, default=128)
    p.add_argument("--split-k", type=int, default=4)
    p.add_argument("--block-n", type=int, default=64)
    p.add_argument("--block-k", type=int, default=128)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--gather", action="store_true", help="load each word once per column")
    p.add_argument("--before", action="store_true", help="dequantize before the product")
    p.add_argument("--sweep", action="store_true", help="time every block and split; keep the best")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    args.dtype = KERNEL_DTYPE if device.type == "cuda" else torch.float32
    shapes = SHAPES_7B
    if args.shapes:
        shapes = {s: tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")}  # type: ignore[misc]
    rows = [int(r) for r in args.rows.split(",")]
    result: dict[str, Any] = {
        **provenance("bench/bench_int4_triton.py", argv, device),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "shapes": {},
    }
    with torch.inference_mode():
        for name, (n, k) in shapes.items():
            result["shapes"][name] = one_shape(n, k, rows, args, device)
    step: dict[str, dict[str, float]] = {}
    for m in rows:
        for kernel in ("triton_us", "torch_us"):
            total = sum(result["shapes"][s][str(m)].get(kernel, 0.0) for s in shapes)
            step.setdefault(str(m), {})[kernel.replace("_us", "_step_ms")] = round(
                total * LAYERS / 1000, 3
            )
    result["step_28_layers"] = step
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
