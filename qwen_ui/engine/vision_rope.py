"""The vision tower's rotary embedding in one Triton kernel per tensor (CUDA).

transformers' ``apply_rotary_pos_emb_vision`` (Qwen2-VL, Qwen2.5-VL and Qwen3-VL alike)
casts q and k to float32, multiplies, rotates by a concatenation, adds and casts back:
about a dozen full-size passes per block, 38 of the 8-image 7B tower's 255 ms on the H200
with the norms and activations (``bench/bench_vision.py --profile``). :func:`rotate` reads
each bf16 value once and writes the result once, with the same float32 operations in the
same order and no fused multiply-add, so its output is the stock function's, bit for bit
(``tests/engine/test_vision_rope.py``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit  # type: ignore[untyped-decorator]
def _rotate(  # type: ignore[no-untyped-def]
    src,
    dst,
    cos,
    sin,
    src_row,
    src_head,
    heads,
    HALF: tl.constexpr,
    HEADS_BLOCK: tl.constexpr,
    HALF_BLOCK: tl.constexpr,
):
    """One token's heads: ``dst = src * cos + rotate_half(src) * sin`` in float32."""
    token = tl.program_id(0)
    h = tl.arange(0, HEADS_BLOCK)[:, None]
    d = tl.arange(0, HALF_BLOCK)[None, :]
    inside = (h < heads) & (d < HALF)
    at = src + token * src_row + h * src_head + d
    x1 = tl.load(at, mask=inside).to(tl.float32)
    x2 = tl.load(at + HALF, mask=inside).to(tl.float32)
    row = token * 2 * HALF + d
    c1 = tl.load(cos + row, mask=d < HALF)
    c2 = tl.load(cos + row + HALF, mask=d < HALF)
    s1 = tl.load(sin + row, mask=d < HALF)
    s2 = tl.load(sin + row + HALF, mask=d < HALF)
    first = x1 * c1 + -x2 * s1
    second = x2 * c2 + x1 * s2
    out = dst + token * heads * 2 * HALF + h * 2 * HALF + d
    tl.store(out, first.to(dst.dtype.element_ty), mask=inside)
    tl.store(out + HALF, second.to(dst.dtype.element_ty), mask=inside)


def rotate(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``apply_rotary_pos_emb_vision(q, k, cos, sin)``: q and k ``[tokens, heads, dim]``
    (any strides with the last dimension contiguous), cos and sin ``[tokens, dim]``."""
    cos, sin = cos.float().contiguous(), sin.float().contiguous()
    return _rotated(q, cos, sin), _rotated(k, cos, sin)


def _rotated(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    tokens, heads, dim = x.shape
    if x.stride(2) != 1:
        x = x.contiguous()
    out = torch.empty((tokens, heads, dim), dtype=x.dtype, device=x.device)
    if tokens:
        _rotate[(tokens,)](
            x,
            out,
            cos,
            sin,
            x.stride(0),
            x.stride(1),
            heads,
            HALF=dim // 2,
            HEADS_BLOCK=triton.next_power_of_2(heads),
            HALF_BLOCK=triton.next_power_of_2(dim // 2),
            enable_fp_fusion=False,  # the stock function's separate roundings
        )
    return out
