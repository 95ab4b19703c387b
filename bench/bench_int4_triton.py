"""Ways to run a Triton int4 x bf16 matmul for a few rows, timed against torch's kernel.

The batched decode step's time grows with its rows mostly in torch's int4 kernel
(``_weight_int4pack_mm``, docs/BENCHMARKS.md): over the 7B step's 112 int4 layers it takes
about 2.1 ms at 1 row and 4.8 at 8, where reading the 4-bit weights once takes well under
a millisecond on the H200. These kernels read each weight once per call for up to 16
rows: the output columns are split over programs (and the inner dimension over
``split_k`` of them, added atomically), each unpacking its block's nibbles and
multiplying with ``tl.dot`` in float32. :class:`Config` names the ways: how words are
loaded and unpacked, nibbles made floats, scales applied, and the layout (``tiled-``);
the engine runs one of them (``tiled-spread-cast-before``: ``qwen_ui.engine.triton_int4``).

Weight layout (``triton_int4.pack``): int32 ``[k / 8, n]``, nibble ``j`` of word
``[w, c]`` holding row ``8 w + j`` of column ``c`` (values 0..15), or :func:`tile`'s;
``scales_and_zeros[k / g, n, 2]`` as torch's kernel takes it, ``W = (q - 8) s + z'``.

    python bench/bench_int4_triton.py                      # on the GPU
    TRITON_INTERPRET=1 python bench/bench_int4_triton.py --device cpu --shapes 64x640 \
        --rows 1,3 --iters 1 --ways spread-cast-before     # CPU dry run (interpreter)

Per shape (the 7B architecture's fused q/k/v, o, gate/up and down by default): every
config of the grid (ways x blocks x splits x warps x stages) timed at ``--probe-rows``,
the ``--keep`` fastest of each probe at every row count of ``--rows``, and torch's kernel;
microseconds per call replayed from a CUDA graph and the largest difference from the
dequantized reference relative to the output's largest value; then the sum over a step's
28 layers of each shape, the fastest config per shape and row count. Prints one JSON
document on stdout.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
import triton
import triton.language as tl
from _profiling import provenance

from qwen_ui.engine.awq import KERNEL_DTYPE, inner_k_tiles, pack_for_cuda
from qwen_ui.engine.triton_int4 import _dequantized, pack

log = logging.getLogger(__name__)

# (out, in) of the Qwen2.5-VL-7B decoder's int4 layers, as the engine fuses them
SHAPES_7B = {
    "qkv": (4608, 3584),
    "o": (3584, 3584),
    "gate_up": (37888, 3584),
    "down": (3584, 18944),
}
LAYERS = 28
WRONG = 0.02  # a larger difference from the dequantized reference: a wrong product


@triton.jit
def _block_words(
    w_ptr, k0, k, n, pid_n, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr, TILED: tl.constexpr
):
    """The ``[BLOCK_K / 8, BLOCK_N]`` words of the block at ``k0`` of the program's columns:
    from :func:`pack`'s layout, or :func:`tile`'s (each block's words contiguous)."""
    word_rows = tl.arange(0, BLOCK_K // 8)
    if TILED:
        first = ((pid_n * (k // BLOCK_K) + k0 // BLOCK_K) * (BLOCK_K // 8)) * BLOCK_N
        at = first + word_rows[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        return tl.load(w_ptr + at)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    at = (k0 // 8 + word_rows)[:, None] * n + cols[None, :]
    return tl.load(w_ptr + at, mask=(cols < n)[None, :], other=0)


@triton.jit(do_not_specialize=["m"])
def _int4_mm(
    x_ptr,
    w_ptr,
    sz_ptr,
    out_ptr,
    m,
    n,
    k,
    k_per_split,
    GROUP: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPREAD: tl.constexpr,
    MAGIC: tl.constexpr,
    HALF: tl.constexpr,
    AFTER: tl.constexpr,
    TILED: tl.constexpr,
    ATOMIC: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows = tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    start = pid_k * k_per_split
    for k0 in range(start, tl.minimum(start + k_per_split, k), BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + rows[:, None] * k + ks[None, :], mask=rows[:, None] < m, other=0.0)
        if SPREAD:  # each word loaded once, its 8 nibbles spread along k by a reshape
            words = _block_words(w_ptr, k0, k, n, pid_n, BLOCK_K, BLOCK_N, TILED)
            nibbles = (words[:, None, :] >> (tl.arange(0, 8) * 4)[None, :, None]) & 0xF
            q = tl.reshape(nibbles, (BLOCK_K, BLOCK_N))
        else:  # each word loaded by the 8 rows of k it holds (the repeats hit the cache)
            words = tl.load(
                w_ptr + (ks // 8)[:, None] * n + cols[None, :], mask=col_ok[None, :], other=0
            )
            q = (words >> ((ks % 8) * 4)[:, None]) & 0xF
        g = k0 // GROUP
        s = tl.load(sz_ptr + (g * n + cols) * 2, mask=col_ok, other=0.0).to(tl.float32)
        z = tl.load(sz_ptr + (g * n + cols) * 2 + 1, mask=col_ok, other=0.0).to(tl.float32)
        if AFTER:  # x W = s (x q) + (z' - 8 s) sum(x): the nibbles multiplied as they are
            if MAGIC:  # the bf16 whose bits are 0x4300 | q is 128 + q: no int-to-float
                qb = (q | 0x4300).to(tl.int16).to(tl.bfloat16, bitcast=True)
                offset = 136.0
            else:
                qb = q.to(tl.float32).to(tl.bfloat16)
                offset = 8.0
            part = tl.dot(x, qb.to(x.dtype))
            total = tl.sum(x.to(tl.float32), axis=1)
            acc += part * s[None, :] + total[:, None] * (z - offset * s)[None, :]
        elif HALF:  # dequantized in bf16 arithmetic from 128 + q's bits: no conversion at all
            qb = (q | 0x4300).to(tl.int16).to(tl.bfloat16, bitcast=True)
            w = (qb - 136.0) * s.to(tl.bfloat16)[None, :] + z.to(tl.bfloat16)[None, :]
            acc += tl.dot(x, w.to(x.dtype))
        else:  # the block dequantized to x's dtype first
            if MAGIC:  # the float32 whose bits are 0x4B000000 | q is 2^23 + q
                qf = (q | 0x4B000000).to(tl.float32, bitcast=True) - 8388616.0
            else:
                qf = q.to(tl.float32) - 8.0
            acc += tl.dot(x, (qf * s[None, :] + z[None, :]).to(x.dtype))
    at = rows[:, None] * n + cols[None, :]
    mask = (rows[:, None] < m) & col_ok[None, :]
    if ATOMIC:
        tl.atomic_add(out_ptr + at, acc, mask=mask)
    else:
        tl.store(out_ptr + at, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _every_eighth(x, BLOCK_M: tl.constexpr, WORDS: tl.constexpr):
    """``x[:, 8 w + j]`` for ``j`` = 0..7, each ``[BLOCK_M, WORDS]``, from ``x`` in
    registers (``k = 8 w + 4 a + 2 b + c``: three splits of its last axes)."""
    c0, c1 = tl.split(tl.reshape(x, (BLOCK_M, WORDS, 2, 2, 2)))
    c0b0, c0b1 = tl.split(c0)
    c1b0, c1b1 = tl.split(c1)
    x0, x4 = tl.split(c0b0)
    x2, x6 = tl.split(c0b1)
    x1, x5 = tl.split(c1b0)
    x3, x7 = tl.split(c1b1)
    return x0, x1, x2, x3, x4, x5, x6, x7


@triton.jit(do_not_specialize=["m"])
def _int4_mm_pairs(
    x_ptr,
    w_ptr,
    sz_ptr,
    out_ptr,
    m,
    n,
    k,
    k_per_split,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GROUP: tl.constexpr,
    ASM: tl.constexpr,
    TILED: tl.constexpr,
    ATOMIC: tl.constexpr,
):
    """One group of ``k`` per step. ``(word >> 4 j) & 0x000F000F | 0x43004300`` holds two
    bf16 numbers, ``128 + q`` of rows ``8 w + j`` and ``8 w + j + 4``: two nibbles made
    floats by two integer operations. Each half multiplies the matching columns of ``x``
    (``tl.dot`` over the group's 16 words; the group's ``x`` loaded whole and taken apart
    in registers), and ``x W = s (x (q + 128)) + (z' - 136 s)
    sum(x)`` per group."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows = tl.arange(0, BLOCK_M)
    row_ok = rows[:, None] < m
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    start = pid_k * k_per_split
    for k0 in range(start, tl.minimum(start + k_per_split, k), GROUP):
        words = _block_words(w_ptr, k0, k, n, pid_n, GROUP, BLOCK_N, TILED)
        # the group's x in one (pipelined) load, then its columns 8 w + j for each j
        ks = k0 + tl.arange(0, GROUP)
        x = tl.load(x_ptr + rows[:, None] * k + ks[None, :], mask=row_ok, other=0.0)
        by_nibble = _every_eighth(x, BLOCK_M, GROUP // 8)
        total = tl.sum(x.to(tl.float32), axis=1)
        part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for j in tl.static_range(4):
            pair = ((words >> (4 * j)) & 0x000F000F) | 0x43004300
            if ASM:  # the two halves of a register are the two numbers: no instruction
                lo, hi = tl.inline_asm_elementwise(
                    "mov.b32 {$0, $1}, $2;",
                    "=h,=h,r",
                    [pair],
                    dtype=(tl.bfloat16, tl.bfloat16),
                    is_pure=True,
                    pack=1,
                )
            else:
                lo = pair.to(tl.int16).to(tl.bfloat16, bitcast=True)
                hi = (pair >> 16).to(tl.int16).to(tl.bfloat16, bitcast=True)
            x_lo, x_hi = by_nibble[j], by_nibble[j + 4]
            part = tl.dot(x_lo, lo.to(x_lo.dtype), acc=part)
            part = tl.dot(x_hi, hi.to(x_hi.dtype), acc=part)
        g = k0 // GROUP
        s = tl.load(sz_ptr + (g * n + cols) * 2, mask=col_ok, other=0.0).to(tl.float32)
        z = tl.load(sz_ptr + (g * n + cols) * 2 + 1, mask=col_ok, other=0.0).to(tl.float32)
        acc += part * s[None, :] + total[:, None] * (z - 136.0 * s)[None, :]
    at = rows[:, None] * n + cols[None, :]
    mask = row_ok & col_ok[None, :]
    if ATOMIC:
        tl.atomic_add(out_ptr + at, acc, mask=mask)
    else:
        tl.store(out_ptr + at, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _nibble_floats(words, shift: tl.constexpr, MAGIC: tl.constexpr):
    """Nibble ``shift / 4`` of every word as a float32 ``q - 8``."""
    q = (words >> shift) & 0xF
    if MAGIC:  # the float32 whose bits are 0x4B000000 | q is 2^23 + q
        return (q | 0x4B000000).to(tl.float32, bitcast=True) - 8388616.0
    return q.to(tl.float32) - 8.0


@triton.jit(do_not_specialize=["m"])
def _int4_mm_joined(
    x_ptr,
    w_ptr,
    sz_ptr,
    out_ptr,
    m,
    n,
    k,
    k_per_split,
    GROUP: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    MAGIC: tl.constexpr,
    ASM: tl.constexpr,
    TILED: tl.constexpr,
    ATOMIC: tl.constexpr,
):
    """The transposed product ``W x^T`` (``[BLOCK_N, BLOCK_M]`` per program): the
    dequantized weight is ``tl.dot``'s left operand, ``[BLOCK_N, BLOCK_K]`` with ``k``
    contiguous. Each word's eight nibbles are dequantized apart and joined (``tl.join``
    keeps a joined axis in one thread) in ``k``'s order, so a thread holds eight
    consecutive ``k`` of one column: the block goes to shared memory in 16-byte stores,
    where the ``spread`` ways store it one weight at a time (``bench/int4_sass.py``).
    Without ``MAGIC`` it dequantizes as the engine does (``qwen_ui.engine.triton_int4``):
    ``ASM`` in bf16 pairs (about 2 instructions a weight), else by float32 casts (about
    5); ``MAGIC`` converts by the float32 magic number instead of a cast."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows = tl.arange(0, BLOCK_M)
    row_ok = rows[:, None] < m
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    start = pid_k * k_per_split
    for k0 in range(start, tl.minimum(start + k_per_split, k), BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + rows[:, None] * k + ks[None, :], mask=row_ok, other=0.0)
        words = tl.trans(_block_words(w_ptr, k0, k, n, pid_n, BLOCK_K, BLOCK_N, TILED))
        g = k0 // GROUP
        s = tl.load(sz_ptr + (g * n + cols) * 2, mask=col_ok, other=0.0)
        z = tl.load(sz_ptr + (g * n + cols) * 2 + 1, mask=col_ok, other=0.0)
        if not MAGIC:  # the engine's own dequantizing: bf16 pairs, or float32 casts
            w = _dequantized(words, s, z, ASM)
        else:
            s, z = s.to(tl.float32)[:, None], z.to(tl.float32)[:, None]
            w0 = _nibble_floats(words, 0, True) * s + z
            w1 = _nibble_floats(words, 4, True) * s + z
            w2 = _nibble_floats(words, 8, True) * s + z
            w3 = _nibble_floats(words, 12, True) * s + z
            w4 = _nibble_floats(words, 16, True) * s + z
            w5 = _nibble_floats(words, 20, True) * s + z
            w6 = _nibble_floats(words, 24, True) * s + z
            w7 = _nibble_floats(words, 28, True) * s + z
            # the last join varies fastest: nibble 4 a + 2 b + c at [.., a, b, c]
            joined = tl.join(
                tl.join(tl.join(w0, w4), tl.join(w2, w6)),
                tl.join(tl.join(w1, w5), tl.join(w3, w7)),
            )
            w = tl.reshape(joined, (BLOCK_N, BLOCK_K))
        acc += tl.dot(w.to(x.dtype), tl.trans(x))
    at = rows[None, :] * n + cols[:, None]
    mask = (rows[None, :] < m) & col_ok[:, None]
    if ATOMIC:
        tl.atomic_add(out_ptr + at, acc, mask=mask)
    else:
        tl.store(out_ptr + at, acc.to(out_ptr.dtype.element_ty), mask=mask)


def tile(packed: torch.Tensor, block_n: int, block_k: int) -> torch.Tensor:
    """:func:`pack`'s ``[k / 8, n]`` → ``[n / block_n, k / block_k, block_k / 8, block_n]``:
    each program's block of words contiguous, its blocks along ``k`` one after another."""
    words, n = packed.shape
    per_block = block_k // 8
    blocks = packed.view(words // per_block, per_block, n // block_n, block_n)
    return blocks.permute(2, 0, 1, 3).contiguous()


SCALED_WAYS = tuple(
    f"{unpack}-{convert}-{scale}"
    for unpack in ("gather", "spread")
    for convert in ("cast", "magic")
    for scale in ("before", "after")
)
JOINED_WAYS = ("joined-cast", "joined-magic", "joined-asm")
WAYS = (*SCALED_WAYS, "spread-half-before", "pairs", "pairs-asm", *JOINED_WAYS)
TILED_WAYS = (
    "tiled-joined-asm",
    "tiled-joined-cast",
    "tiled-joined-magic",
    "tiled-spread-cast-before",
    "tiled-spread-half-before",
    "tiled-spread-magic-before",
    "tiled-pairs",
    "tiled-pairs-asm",
)


@dataclass(frozen=True)
class Config:
    """One way to run a kernel: the output's columns in blocks of ``block_n`` per program,
    the inner dimension in ``split_k`` parts of whole blocks (the last one shorter where
    they do not divide; added atomically into float32 when more than one) walked
    ``block_k`` at a time, ``warps`` and ``stages`` as Triton takes them.

    ``way``: ``pairs`` (:func:`_int4_mm_pairs`, ``block_k`` = the group; ``-asm`` splits
    the pairs by inline PTX, else by integer ops) or, for :func:`_int4_mm`,
    ``UNPACK-CONVERT-SCALE``: ``spread`` loads each word once (``gather`` once per row of
    ``k`` it holds); ``magic`` makes nibbles floats by their bits (``cast`` by
    conversion; ``half`` by their bits as bf16, dequantized in bf16 arithmetic, with
    ``before`` only); ``after`` applies the scales after the product (``before`` before).
    ``joined-CONVERT`` (:func:`_int4_mm_joined`): the transposed product, ``cast`` or
    ``magic`` as above, scales before; ``asm`` dequantizes in bf16 pairs by inline PTX.
    ``tiled-WAY``: the weight in :func:`tile`'s layout (``spread``, ``pairs`` and
    ``joined`` only)."""

    split_k: int
    block_n: int
    block_k: int
    warps: int
    stages: int
    way: str

    @property
    def name(self) -> str:
        return (
            f"split{self.split_k}-n{self.block_n}-k{self.block_k}-w{self.warps}"
            f"-s{self.stages}-{self.way}"
        )


def int4_mm(
    x: torch.Tensor, packed: torch.Tensor, scales_and_zeros: torch.Tensor, group: int, c: Config
) -> torch.Tensor:
    """``x @ W.T`` for ``x`` ``[m, k]`` (m at most 16), ``W`` from :func:`pack`'s layout
    (or :func:`tile`'s, for ``tiled-`` ways)."""
    m, k = x.shape
    n = scales_and_zeros.shape[1]
    tiled = c.way.startswith("tiled-")
    way = c.way.removeprefix("tiled-")
    pairs = way.startswith("pairs")
    if (
        m > 16
        or group % c.block_k
        or k % c.block_k
        or c.split_k > k // c.block_k
        or (pairs and c.block_k != group)
        or (tiled and (n % c.block_n or way.startswith("gather")))
    ):
        raise ValueError(f"unsupported shape: m={m}, k={k}, group={group}, {c.name}")
    atomic = c.split_k > 1
    if atomic:
        out = torch.zeros(m, n, device=x.device, dtype=torch.float32)
    else:
        out = torch.empty(m, n, device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(n, c.block_n), c.split_k)
    # whole blocks per split, the last split taking what is left
    per_split = triton.cdiv(k // c.block_k, c.split_k) * c.block_k
    args = (x.contiguous(), packed, scales_and_zeros, out, m, n, k, per_split)
    launch = {"num_warps": c.warps, "num_stages": c.stages}
    if pairs:
        _int4_mm_pairs[grid](
            *args,
            BLOCK_M=16,
            BLOCK_N=c.block_n,
            GROUP=group,
            ASM=way == "pairs-asm",
            TILED=tiled,
            ATOMIC=atomic,
            **launch,
        )
    elif way.startswith("joined"):
        _int4_mm_joined[grid](
            *args,
            GROUP=group,
            BLOCK_M=16,
            BLOCK_N=c.block_n,
            BLOCK_K=c.block_k,
            MAGIC=way == "joined-magic",
            ASM=way == "joined-asm",
            TILED=tiled,
            ATOMIC=atomic,
            **launch,
        )
    else:
        unpack, convert, scale = way.split("-")
        _int4_mm[grid](
            *args,
            GROUP=group,
            BLOCK_M=16,
            BLOCK_N=c.block_n,
            BLOCK_K=c.block_k,
            SPREAD=unpack == "spread",
            MAGIC=convert == "magic",
            HALF=convert == "half",
            AFTER=scale == "after",
            TILED=tiled,
            ATOMIC=atomic,
            **launch,
        )
    return out.to(x.dtype) if atomic else out


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
    """Every config of the grid at ``--probe-rows``; the ``--keep`` fastest of them at every
    row count, and torch's kernel, for one ``[n, k]`` weight."""
    gen = torch.Generator(device="cpu").manual_seed(n * 7 + k)
    q = torch.randint(0, 16, (n, k), generator=gen, dtype=torch.int32).to(device)
    scales = torch.rand(k // args.group, n, generator=gen) * 0.02 + 0.001
    zeros = (8.0 - torch.randint(0, 16, (k // args.group, n), generator=gen)) * scales
    sz = torch.stack([scales, zeros], dim=-1).to(KERNEL_DTYPE).to(device).contiguous()
    packed = pack(q)
    weight = reference(q, sz, args.group)
    torch_packed = pack_for_cuda(q, inner_k_tiles(k)) if device.type == "cuda" else None
    inputs = {m: torch.randn(m, k, generator=gen).to(device=device, dtype=args.dtype) for m in rows}

    layouts: dict[tuple[int, int], torch.Tensor] = {}

    def measure(m: int, c: Config) -> dict[str, Any]:
        x = inputs[m]
        want = x.float() @ weight.t()
        words = packed
        if c.way.startswith("tiled-"):
            key = (c.block_n, c.block_k)
            words = layouts[key] if key in layouts else layouts.setdefault(key, tile(packed, *key))
        try:
            got = int4_mm(x, words, sz, args.group, c)
        except Exception as exc:  # a config Triton cannot build is reported, not fatal
            log.warning("%s: %s", c.name, exc)
            return {"error": f"{type(exc).__name__}: {exc}"[:300]}
        diff = float((got.float() - want).abs().max()) / float(want.abs().max())
        if not diff <= WRONG:  # also NaN: reported, never the fastest
            return {"error": "wrong product", "max_rel_diff": diff}
        us = timed(lambda: int4_mm(x, words, sz, args.group, c), args.iters, device)
        return {"us": round(us, 1), "max_rel_diff": round(diff, 6)}

    grid = configs(k, args)
    probe: dict[str, Any] = {}
    kept: dict[str, Config] = {}
    for m in args.probe_rows:
        probe[str(m)] = {c.name: measure(m, c) for c in grid}
        built = [c for c in grid if "error" not in probe[str(m)][c.name]]
        fastest = sorted(built, key=lambda c: probe[str(m)][c.name]["us"])[: args.keep]
        kept.update((c.name, c) for c in fastest)
    out: dict[str, Any] = {"probe": probe}
    for m in rows:
        timings = {
            name: probe.get(str(m), {}).get(name) or measure(m, c) for name, c in kept.items()
        }
        ran = [name for name, t in timings.items() if "us" in t]  # built and right
        best = min(ran, key=lambda name: timings[name]["us"])
        entry: dict[str, Any] = {"configs": timings, "best": best, **timings[best]}
        entry["max_rel_diff"] = max(timings[name]["max_rel_diff"] for name in ran)
        if torch_packed is not None:
            flat = inputs[m].to(KERNEL_DTYPE)
            call = functools.partial(torch._weight_int4pack_mm, flat, torch_packed, args.group, sz)
            want = flat.float() @ weight.t()
            entry["torch_max_rel_diff"] = round(
                float((call().float() - want).abs().max()) / float(want.abs().max()), 6
            )
            entry["torch_us"] = round(timed(call, args.iters, device), 1)
        out[str(m)] = entry
    return out


def configs(k: int, args: argparse.Namespace) -> list[Config]:
    """The grid: every way, block, split, warp and stage count of the options whose block
    divides ``k`` and the group (``pairs`` only with blocks as deep as the group)."""
    return [
        Config(split, block_n, block_k, warps, stages, way)
        for way in args.ways
        for block_n, block_k in args.blocks
        for split in args.splits
        for warps in args.warps
        for stages in args.stages
        if args.group % block_k == 0
        and k % block_k == 0
        and split <= k // block_k
        and (block_k == args.group or "pairs" not in way)
    ]


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--shapes", default="", help="NxK,... (default: the 7B decoder's four)")
    p.add_argument("--rows", type=ints, default=[1, 2, 4, 8, 16])
    p.add_argument("--probe-rows", type=ints, default=[1, 8, 16], help="the grid is timed at")
    p.add_argument("--keep", type=int, default=3, help="fastest per probe, timed at every row")
    p.add_argument("--group", type=int, default=128)
    p.add_argument("--splits", type=ints, default=[1, 2, 4, 8, 16])
    p.add_argument(
        "--blocks",
        type=lambda t: [tuple(int(v) for v in b.split("x")) for b in t.split(",")],
        default=[(64, 128), (128, 128), (256, 128), (128, 64)],
        help="BLOCK_NxBLOCK_K,...",
    )
    p.add_argument("--warps", type=ints, default=[4])
    p.add_argument("--stages", type=ints, default=[2, 3, 4])
    p.add_argument(
        "--ways",
        type=lambda t: t.split(","),
        default=["tiled-joined-asm", "tiled-joined-cast", "tiled-spread-cast-before"],
        help=f"of {','.join((*WAYS, *TILED_WAYS))}",
    )
    p.add_argument("--iters", type=int, default=50)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    args.dtype = KERNEL_DTYPE if device.type == "cuda" else torch.float32
    shapes = SHAPES_7B
    if args.shapes:
        shapes = {s: tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")}  # type: ignore[misc]
    rows = sorted({*args.rows, *args.probe_rows})
    result: dict[str, Any] = {
        **provenance("bench/bench_int4_triton.py", argv, device),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "shapes": {},
    }
    with torch.inference_mode():
        for name, (n, k) in shapes.items():
            result["shapes"][name] = one_shape(n, k, rows, args, device)
            summary = {
                m: (e["best"], e["us"], e.get("torch_us"))
                for m, e in result["shapes"][name].items()
                if m != "probe"
            }
            log.info("%s: %s", name, json.dumps(summary))
    step: dict[str, dict[str, float]] = {}
    for m in rows:
        for kernel in ("us", "torch_us"):
            total = sum(result["shapes"][s][str(m)].get(kernel, 0.0) for s in shapes)
            name = "triton_step_ms" if kernel == "us" else "torch_step_ms"
            step.setdefault(str(m), {})[name] = round(total * LAYERS / 1000, 3)
    result["step_28_layers"] = step
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    sys.exit(main())
