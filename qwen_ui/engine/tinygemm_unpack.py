"""The dequantized prefill's weight, straight from the CUDA int4 kernel's packed layout, by a
Triton kernel that reads each packed block once and writes its tile row-major.

``torch._convert_weight_to_int4pack`` (PyTorch's ``int4mm.cu``) packs an ``[n, k]`` int4
matrix as ``packed[n / 8, k / (16 t), 32, t / 2]`` int32 (``t`` inner k-tiles): block
``(n-tile, k-tile)`` holds the ``[8, 16 t]`` tile of those rows and columns. Its lane
``l`` (0..31) and word ``p`` (0..t/2-1) hold row ``l // 4``; nibble ``j`` of the word
(bits ``4 j``) is column ``32 p + 8 i + 2 q + h`` of the tile, where ``q = l % 4``,
``i = j % 4`` and ``h = j // 4`` (high nibbles of four bytes, then their low nibbles;
``tests/engine/test_awq.py`` writes that rule out). So the tile is a fixed permutation of
the block's nibbles, ``[r, q, p, h, i] -> [r, p, i, q, h]``, done in registers.

Inductor's kernel for :func:`qwen_ui.engine.awq.dequantize_tinygemm` gathers each output
value's word through an index table and moved the weight at about a third of a device
copy's bandwidth (bench/README.md). The loader checks this kernel against that function
on every layer shape before using it (:func:`qwen_ui.engine.prefill.compile_prefill`).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import triton
import triton.language as tl


@triton.jit  # type: ignore[untyped-decorator]
def _unpack_tiles(  # type: ignore[no-untyped-def]
    packed, sz, out, n, k, GROUP: tl.constexpr, TILES: tl.constexpr, SPAN: tl.constexpr
):
    """One program per ``SPAN`` consecutive ``[8, 16 TILES]`` tiles of one row tile (their
    blocks are contiguous): ``out = (q - 8) * s + z`` rounded to ``out``'s dtype after the
    product and after the sum, as the eager bf16 ops round. Each row's scale and zero are
    loaded once per group of ``GROUP`` columns and broadcast over it."""
    words_per_lane: tl.constexpr = TILES // 2
    width: tl.constexpr = 16 * TILES
    span: tl.constexpr = SPAN * width  # columns of this program; it or GROUP divides the other
    groups: tl.constexpr = (span + GROUP - 1) // GROUP
    per: tl.constexpr = span // groups  # columns per group here (GROUP, or all of them)
    k_tiles = k // width
    n_tile = tl.program_id(0)
    tiles = tl.program_id(1) * SPAN + tl.arange(0, SPAN)  # k-tiles of this program
    inside = tiles < k_tiles
    lanes = tl.arange(0, 32)[:, None] * words_per_lane + tl.arange(0, words_per_lane)[None, :]
    block = (n_tile * k_tiles + tiles) * 32 * words_per_lane
    words = tl.load(packed + block[:, None, None] + lanes[None, :, :], mask=inside[:, None, None])
    nibbles = (words[:, :, :, None] >> (tl.arange(0, 8) * 4)[None, None, None, :]) & 0xF
    tile = tl.reshape(nibbles, (SPAN, 8, 4, words_per_lane, 2, 4))  # s, r, q, p, h, i
    tile = tl.permute(tile, (1, 0, 3, 5, 2, 4))  # r, s, p, i, q, h
    tile = tl.reshape(tile, (8, groups, per))
    rows = n_tile * 8 + tl.arange(0, 8)[:, None]
    first = tl.program_id(1) * span
    group = first // GROUP + tl.arange(0, groups)[None, :]
    at = (group * n + rows) * 2  # [8, groups]
    present = group * GROUP < k
    scale = tl.load(sz + at, mask=present).to(tl.float32)[:, :, None]
    zero = tl.load(sz + at + 1, mask=present).to(tl.float32)[:, :, None]
    product = ((tile.to(tl.float32) - 8.0) * scale).to(
        out.dtype.element_ty, fp_downcast_rounding="rtne"
    )
    value = (product.to(tl.float32) + zero).to(out.dtype.element_ty, fp_downcast_rounding="rtne")
    value = tl.reshape(value, (8, span))
    cols = first + tl.arange(0, span)[None, :]
    tl.store(out + rows * k + cols, value, mask=cols < k)


@functools.cache
def _tuned() -> Any:
    """The kernel with its tile span and warps chosen by Triton's autotuner per layer
    shape, on first use (made here: the autotuner needs a GPU driver)."""
    configs = [
        triton.Config({"SPAN": span}, num_warps=warps) for span in (1, 2, 4, 8) for warps in (4, 8)
    ]
    return triton.autotune(configs=configs, key=["n", "k", "GROUP"])(_unpack_tiles)


def unpack_dequantize(
    packed: torch.Tensor,
    gather: torch.Tensor,
    scales_and_zeros: torch.Tensor,
    group_size: int,
    dtype: torch.dtype,
) -> torch.Tensor:
    """``[n, k]`` in ``dtype`` (the kernel's bf16 scales and zeros), as
    :func:`qwen_ui.engine.awq.dequantize_tinygemm` computes it; ``gather`` is not needed
    (the layout is closed-form here) and kept for the same signature."""
    del gather
    n_tiles, k_tiles, lanes, words = packed.shape
    tiles = 2 * words
    n, k = n_tiles * 8, k_tiles * 16 * tiles
    if lanes != 32 or scales_and_zeros.dtype != torch.bfloat16 or dtype != torch.bfloat16:
        raise ValueError("unpack_dequantize takes the CUDA kernel's layout and bf16 scales")
    out = torch.empty((n, k), dtype=dtype, device=packed.device)

    def grid(meta: dict[str, int]) -> tuple[int, int]:
        return (n_tiles, triton.cdiv(k_tiles, meta["SPAN"]))

    args = (packed, scales_and_zeros, out, n, k)
    if packed.is_cuda:
        _tuned()[grid](*args, GROUP=group_size, TILES=tiles)
    else:  # Triton's interpreter (tests): no autotuning there
        _unpack_tiles[grid](*args, GROUP=group_size, TILES=tiles, SPAN=2)
    return out
