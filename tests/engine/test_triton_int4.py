"""The Triton int4 kernel for a few rows (``qwen_ui.engine.triton_int4``): its layout and
sizes here; its products on the CPU through Triton's interpreter, in a process of its own
(the interpreter is chosen when Triton is first imported)."""

from __future__ import annotations

import textwrap

import torch
from torch import nn

from qwen_ui.engine import triton_int4
from qwen_ui.engine.awq import Int4Linear
from qwen_ui.engine.awq_format import dequantize, pack_columns, unpack_columns
from tests.engine.support import awq_quantize, interpreted

# The Triton kernel through the interpreter (float32: the interpreter mishandles bf16) against
# the dequantized weight, for a 5-block inner dimension over 1, 2 and 3 splits (the last
# split shorter) and 64- and 32-column blocks.
INTERPRETED = textwrap.dedent(
    """
    import json, torch
    from qwen_ui.engine import triton_int4

    torch.manual_seed(0)
    n, k, group = 128, 640, 128
    q = torch.randint(0, 16, (n, k), dtype=torch.int32)
    scales = torch.rand(k // group, n) * 0.02 + 0.001
    zeros = (8.0 - torch.randint(0, 16, (k // group, n))) * scales
    sz = torch.stack([scales, zeros], dim=-1).to(torch.bfloat16).contiguous()
    per_k = sz.float().repeat_interleave(group, dim=0)
    weight = (q.t().float() - 8.0) * per_k[..., 0] + per_k[..., 1]  # [k, n]
    worst = {}
    for plan in (triton_int4.Plan(2, 64), triton_int4.Plan(3, 32), triton_int4.Plan(1, 64)):
        words = triton_int4.tile(triton_int4.pack(q), plan.block_n)
        for rows in (1, 5, 16):
            x = torch.randn(rows, k)
            want = x @ weight
            got = triton_int4.launch(x, words, sz, group, *plan.args())
            key = f"{plan.split_k}x{plan.block_n}@{rows}"
            worst[key] = float((got - want).abs().max() / want.abs().max())
    print(json.dumps(worst))
    """
)


def test_the_kernel_multiplies_as_the_dequantized_weight() -> None:
    worst = interpreted(INTERPRETED)
    assert len(worst) == 3 * 3
    assert all(diff < 1e-5 for diff in worst.values()), worst


def cpu_layer(out_features: int, in_features: int) -> tuple[Int4Linear, torch.Tensor, torch.Tensor]:
    """An Int4Linear on the CPU, its nibbles ``[out, in]`` and dequantized weight ``[in, out]``."""
    q, z, s = awq_quantize(torch.randn(out_features, in_features) * 0.05)
    qweight, qzeros = pack_columns(q), pack_columns(z)
    cpu = torch.device("cpu")
    layer = Int4Linear.from_awq(qweight, qzeros, s, None, 128, cpu, torch.float32)
    nibbles = unpack_columns(qweight).t().contiguous()
    return layer, nibbles, dequantize(qweight, qzeros, s, 128).float().t()


def test_a_layer_sends_its_row_range_to_the_operator() -> None:
    """From 3 to 16 rows the layer multiplies through ``qwen_ui::int4_rows`` (on the CPU:
    its dequantized product), otherwise through torch's kernel; eager and compiled."""
    torch.manual_seed(1)
    layer, nibbles, weight = cpu_layer(128, 640)
    plan = triton_int4.Plan(3, 64)
    layer.keep_rows_kernel(triton_int4.tile(triton_int4.pack(nibbles), 64), plan.args(), 3, 16)
    assert "Triton from 3 to 16 rows" in repr(layer)
    compiled = torch.compile(layer, dynamic=False)
    sz = layer.scales_and_zeros
    for rows in (1, 2, 3, 8, 16, 17):
        x = torch.randn(rows, 640)
        flat = x.to(torch.bfloat16)
        if 3 <= rows <= 16:
            want = torch.ops.qwen_ui.int4_rows(flat, layer.rows_words, sz, 128, *plan.args())
        else:
            want = torch._weight_int4pack_mm_for_cpu(flat, layer.packed, 128, sz)
        assert torch.equal(layer(x), want.float()), rows
        assert torch.equal(compiled(x), want.float()), rows
        exact = flat.float() @ weight
        assert (layer(x) - exact).abs().max() <= 2e-2 * exact.abs().max()
    layer.drop_rows_kernel()
    assert layer.rows_from == 0 and not hasattr(layer, "rows_words")


def test_untile_gives_the_nibbles_back() -> None:
    q = torch.randint(0, 16, (192, 384), dtype=torch.int32)
    assert torch.equal(triton_int4.untile(triton_int4.tile(triton_int4.pack(q), 64)), q)


def test_pack_puts_row_8w_plus_j_in_nibble_j() -> None:
    q = torch.arange(32, dtype=torch.int32).view(2, 16) % 16  # [n = 2, k = 16]
    packed = triton_int4.pack(q)
    assert packed.shape == (2, 2)  # [k / 8, n]
    for word in range(2):
        for col in range(2):
            for j in range(8):
                assert (int(packed[word, col]) >> (4 * j)) & 0xF == int(q[col, 8 * word + j])


def test_tile_makes_each_programs_block_contiguous() -> None:
    k, n, block_n = 256, 6, 3
    packed = torch.arange(k // 8 * n, dtype=torch.int32).view(k // 8, n)
    tiled = triton_int4.tile(packed, block_n)
    assert tiled.shape == (2, 2, 16, 3)  # [n / block_n, k / 128, 128 / 8, block_n]
    assert torch.equal(tiled[1, 0], packed[0:16, 3:6])  # columns 3..5, k 0..127
    assert torch.equal(tiled[0, 1], packed[16:32, 0:3])  # columns 0..2, k 128..255


def test_plans_follow_the_shape_and_unfit_shapes_are_left_alone() -> None:
    assert triton_int4.plan_for(37888, 3584) == triton_int4.Plan(4, 128)  # 7B gate/up
    assert triton_int4.plan_for(3584, 18944) == triton_int4.Plan(16, 64)  # 7B down
    assert triton_int4.plan_for(4608, 3584) == triton_int4.Plan(8, 64)  # 7B q/k/v
    assert triton_int4.fits(4608, 3584, 128)
    assert not triton_int4.fits(4608, 3584, 64)  # groups smaller than a block
    assert not triton_int4.fits(4600, 3584, 128)  # columns not a whole number of blocks


def test_cpu_layers_keep_no_copy() -> None:
    layer, _, _ = cpu_layer(128, 256)
    assert triton_int4.keep_copies(nn.Sequential(layer)) == 0
    assert layer.rows_from == 0 and not hasattr(layer, "rows_words")
