"""The vision rotary kernel (``qwen_ui.engine.vision_rope``) against transformers' own
``apply_rotary_pos_emb_vision``: on the CPU through Triton's interpreter, in a process of
its own (float32: the interpreter mishandles bf16); on the GPU in bf16, bit for bit."""

from __future__ import annotations

import textwrap

import pytest
import torch

from tests.engine.support import interpreted

# q and k as the tower's attention takes them (views of one qkv tensor), 16 heads of 80 (the
# 7B tower's; a half of 40 is not a power of two) and 3 heads of 8, over 7 tokens
INTERPRETED = textwrap.dedent(
    """
    import json, torch
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import apply_rotary_pos_emb_vision
    from qwen_ui.engine import vision_rope

    torch.manual_seed(0)
    same = []
    for tokens, heads, dim in ((7, 16, 80), (7, 3, 8)):
        qkv = torch.randn(tokens, 3, heads, dim).permute(1, 0, 2, 3)
        angles = torch.randn(tokens, dim // 2) * 3
        emb = torch.cat((angles, angles), dim=-1)
        want = apply_rotary_pos_emb_vision(qkv[0], qkv[1], emb.cos(), emb.sin())
        got = vision_rope.rotate(qkv[0], qkv[1], emb.cos(), emb.sin())
        same += [bool(torch.equal(a, b)) for a, b in zip(want, got)]
        same.append(all(g.shape == (tokens, heads, dim) and g.is_contiguous() for g in got))
    print(json.dumps(same))
    """
)


def test_the_kernel_rotates_as_transformers() -> None:
    assert interpreted(INTERPRETED) == [True] * 6


@pytest.mark.gpu
@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_the_kernel_is_bit_for_bit_the_stock_rotary_on_the_gpu(family: str) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    import importlib

    from qwen_ui.engine import vision_rope

    stock = importlib.import_module(
        f"transformers.models.{family}.modeling_{family}"
    ).apply_rotary_pos_emb_vision
    torch.manual_seed(0)
    tokens, heads, dim = 3996, 16, 80  # one 1024x768 image through the 7B tower
    qkv = torch.randn(tokens, 3, heads, dim, device="cuda", dtype=torch.bfloat16)
    qkv = qkv.permute(1, 0, 2, 3)
    angles = torch.rand(tokens, dim // 2, device="cuda") * 60
    emb = torch.cat((angles, angles), dim=-1)
    want = stock(qkv[0], qkv[1], emb.cos(), emb.sin())
    got = vision_rope.rotate(qkv[0], qkv[1], emb.cos(), emb.sin())
    for a, b in zip(want, got, strict=True):
        assert a.dtype == b.dtype == torch.bfloat16
        assert torch.equal(a, b), (a.float() - b.float()).abs().max()
