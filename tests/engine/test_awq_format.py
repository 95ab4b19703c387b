"""AutoAWQ GEMM packing: order, shapes, round trips, key names."""

from __future__ import annotations

import torch

from qwen_ui.engine import awq_format as A


def test_pack_order_is_autoawq_interleave() -> None:
    values = torch.arange(8, dtype=torch.int32)[None, :]
    assert int(A.pack_columns(values)) & 0xFFFFFFFF == 0x75316420
    # column j sits in nibble [0, 4, 1, 5, 2, 6, 3, 7][j]
    one_hot = torch.zeros((1, 8), dtype=torch.int32)
    one_hot[0, 1] = 15
    assert int(A.pack_columns(one_hot)) & 0xFFFFFFFF == 0xF << 16


def test_pack_unpack_round_trip_with_sign_bit() -> None:
    gen = torch.Generator().manual_seed(0)
    values = torch.randint(0, 16, (256, 64), generator=gen, dtype=torch.int32)
    values[:, 7] = 15  # nibble 7 set: negative int32
    packed = A.pack_columns(values)
    assert packed.dtype == torch.int32 and packed.shape == (256, 8) and (packed < 0).any()
    assert torch.equal(A.unpack_columns(packed), values)


def test_linear_round_trip_matches_group_dequantization() -> None:
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(384, 256, generator=gen)
    q, scales, zeros = A.quantize(w)
    tensors = A.pack_linear(q, scales, zeros)
    assert tensors["qweight"].shape == (256, 48)
    assert tensors["qzeros"].shape == (2, 48)
    assert tensors["scales"].shape == (2, 384) and tensors["scales"].dtype == torch.float16
    dense = A.dequantize(**tensors)
    expected = A.dequantize_int(q, scales.half().float(), zeros)
    assert torch.equal(dense, expected)
    assert (dense - w).abs().max() <= scales.max() * 0.51 + 1e-3  # within half a step


def test_key_mapping() -> None:
    assert A.to_module_key("visual.merger.mlp.0.weight") == "model.visual.merger.mlp.0.weight"
    assert A.to_module_key("model.layers.3.mlp.down_proj.qweight") == (
        "model.language_model.layers.3.mlp.down_proj.qweight"
    )
    assert A.to_module_key("model.embed_tokens.weight") == (
        "model.language_model.embed_tokens.weight"
    )
    assert A.to_module_key("lm_head.weight") == "lm_head.weight"
    for key in ("visual.blocks.0.attn.qkv.bias", "model.norm.weight", "lm_head.weight"):
        assert A.to_legacy_key(A.to_module_key(key)) == key
