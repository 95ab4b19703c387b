"""The one-token attention kernels (``qwen_ui.engine.decode_attention``) against
:func:`~qwen_ui.engine.fused.decode_attention` and SDPA over repeated K/V heads: on the CPU
through Triton's interpreter, in a process of its own (float32: the interpreter mishandles
bf16); on the GPU in bf16 at the 7B decoder's shapes, eager and as a compiled step
recorded in a CUDA graph."""

from __future__ import annotations

import textwrap

import pytest
import torch

from qwen_ui.engine import fused
from tests.engine.support import interpreted

# Each case: batch, query heads, K/V heads, length, dim, mask kind, shares (None: the
# plan's, for 8 programs off CUDA). The K/V are views of a longer cache, the masks
# longer than the cache; sequence 0 keeps 5 positions (bool and additive), so its later
# shares are fully masked; the mask "one" is a single row read by both sequences.
INTERPRETED = textwrap.dedent(
    """
    import json, torch
    from qwen_ui.engine import decode_attention as kernel
    from qwen_ui.engine.fused import decode_attention

    CASES = [
        (1, 7, 1, 9, 16, "none", None),
        (1, 7, 1, 64, 16, "bool", None),
        (2, 14, 2, 300, 16, "bool", None),
        (2, 14, 2, 300, 16, "additive", None),
        (2, 14, 2, 300, 16, "none", (5, 1)),
        (2, 4, 2, 200, 32, "additive", (1, 4)),
        (2, 6, 2, 130, 32, "one", None),
    ]

    def mask_of(kind, batch, length):
        if kind == "none":
            return None
        keep = torch.ones(batch if kind != "one" else 1, 1, 1, length + 3, dtype=torch.bool)
        keep[0, ..., 5:] = False
        if kind == "additive":
            return torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)
        return keep

    torch.manual_seed(0)
    worst = {}
    for batch, heads, kv_heads, length, dim, kind, shares in CASES:
        q = torch.randn(batch, 1, heads, dim).transpose(1, 2)
        k = torch.randn(batch, kv_heads, length + 7, dim)[:, :, :length]
        v = torch.randn(batch, kv_heads, length + 7, dim)[:, :, :length]
        mask = mask_of(kind, batch, length)
        cut = None if mask is None else mask[..., :length].expand(batch, 1, 1, length)
        reference = torch.nn.functional.scaled_dot_product_attention(
            q,
            k.repeat_interleave(heads // kv_heads, dim=1),
            v.repeat_interleave(heads // kv_heads, dim=1),
            attn_mask=cut,
            scale=0.3,
        ).transpose(1, 2)
        stock = decode_attention(q, k, v, mask, 0.3)
        if shares is None:
            got = kernel.attention(q, k, v, mask, 0.3)
        else:
            got = kernel.launch(q, k, v, mask, 0.3, shares=shares)
        key = f"{batch}x{heads}/{kv_heads}x{length}x{dim}-{kind}-{shares}"
        assert got.shape == (batch, 1, heads, dim) and got.is_contiguous(), key
        worst[key] = max(float((got - reference).abs().max()), float((got - stock).abs().max()))
    worst["plans"] = [kernel.plan(300, 4, 8), kernel.plan(9, 1, 8), kernel.plan(1536, 4, 264)]
    print(json.dumps(worst))
    """
)


def test_the_kernels_attend_as_sdpa_over_repeated_heads() -> None:
    worst = interpreted(INTERPRETED)
    assert worst.pop("plans") == [[3, 2], [1, 1], [24, 1]]
    assert len(worst) == 7
    assert all(diff < 1e-5 for diff in worst.values()), worst


def test_the_plan_reaches_the_programs_without_empty_shares() -> None:
    from qwen_ui.engine.decode_attention import BLOCK_N, plan

    for length in (1, 63, 64, 65, 1536, 4352):
        for heads in (1, 4, 8, 32, 64, 128, 256):
            shares, per_share = plan(length, heads, 264)
            blocks = -(-length // BLOCK_N)
            assert shares * per_share >= blocks > (shares - 1) * per_share  # none empty
            assert heads * shares >= min(264, heads * blocks)


def test_the_cpu_takes_the_inductor_attention() -> None:
    q, k = torch.randn(1, 28, 1, 128), torch.randn(1, 4, 64, 128)
    from qwen_ui.engine import decode_attention as kernel

    assert not kernel.fits(q, k, None)
    out = fused.step_attention(q, k, k, None, 0.1)
    torch.testing.assert_close(out, fused.decode_attention(q, k, k, None, 0.1))


def cuda_inputs(
    batch: int, heads: int, kv_heads: int, length: int, dim: int = 128
) -> tuple[torch.Tensor, ...]:
    """bf16 q (batch, heads, 1, dim) and a slot cache's K/V views (batch of twice the
    slots, length + 64) with a bool mask keeping a different length per sequence."""
    q = torch.randn(batch, 1, heads, dim, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    cache = torch.randn(2, 2 * batch, kv_heads, length + 64, dim, device="cuda")
    k, v = cache.to(torch.bfloat16)[:, :batch, :, :length]
    valid = torch.randint(1, length + 1, (batch, 1), device="cuda")
    valid[0] = length
    mask = (torch.arange(length, device="cuda") < valid).view(batch, 1, 1, length)
    return q, k, v, mask


def reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """SDPA over repeated heads in float32: batch, 1, heads, dim."""
    groups = q.shape[1] // k.shape[1]
    kf, vf = (t.float().repeat_interleave(groups, dim=1) for t in (k, v))
    scale = q.shape[-1] ** -0.5
    out = torch.nn.functional.scaled_dot_product_attention(
        q.float(), kf, vf, attn_mask=mask, scale=scale
    )
    return out.transpose(1, 2)


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [1, 8, 16])
@pytest.mark.parametrize("heads", [(28, 4), (16, 2), (32, 8)])
def test_the_kernels_match_the_reference_on_the_gpu(batch: int, heads: tuple[int, int]) -> None:
    """7B (28/4 heads), 3B and Qwen3-8B shapes over 1,536 positions: within the stock
    bf16 path's own distance from float32, bool and additive masks alike."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from qwen_ui.engine import decode_attention as kernel

    torch.manual_seed(0)
    q, k, v, mask = cuda_inputs(batch, *heads, 1536)
    added = torch.zeros(mask.shape, device="cuda", dtype=torch.bfloat16)
    added = added.masked_fill(~mask, torch.finfo(torch.bfloat16).min)
    want = reference(q, k, v, mask)
    stock = fused.decode_attention(q, k, v, mask, q.shape[-1] ** -0.5)
    bound = float((stock.float() - want).abs().max())
    for m in (mask, added):
        assert kernel.fits(q, k, m)
        got = kernel.attention(q, k, v, m, q.shape[-1] ** -0.5)
        assert got.dtype == torch.bfloat16 and got.shape == (batch, 1, heads[0], 128)
        error = float((got.float() - want).abs().max())
        assert error <= 2 * bound + 1e-3, (error, bound)


@pytest.mark.gpu
def test_a_compiled_step_records_and_replays_the_kernels() -> None:
    """A step that writes its new K/V into the cache in place, then attends through
    ``fused.step_attention``, compiled (the kernels' one operator) and recorded as a CUDA
    graph; replayed with new inputs it gives the reference's output."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    torch.manual_seed(0)
    batch, length = 8, 1536
    q, k, v, mask = cuda_inputs(batch, 28, 4, length)
    keys, values = k.contiguous(), v.contiguous()
    new = torch.randn(2, batch, 4, 128, device="cuda", dtype=torch.bfloat16)
    at = torch.full((batch,), 700, device="cuda")
    slots = torch.arange(batch, device="cuda")

    def step(q: torch.Tensor, new: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
        keys[slots, :, at] = new[0]
        values[slots, :, at] = new[1]
        return fused.step_attention(q, keys, values, mask, 128**-0.5)

    compiled = torch.compile(step, dynamic=False)
    for _ in range(2):
        compiled(q, new, at)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = compiled(q, new, at)
    q.copy_(torch.randn_like(q))
    new.copy_(torch.randn_like(new))
    at.fill_(900)
    graph.replay()
    torch.cuda.synchronize()
    want = reference(q, keys, values, mask)
    assert torch.equal(keys[slots, :, 900], new[0]) and torch.equal(values[slots, :, 900], new[1])
    stock = fused.decode_attention(q, keys, values, mask, 128**-0.5).float()
    bound = float((stock - want).abs().max())
    assert float((out.float() - want).abs().max()) <= 2 * bound + 1e-3
