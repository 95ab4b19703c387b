from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from torch import nn

from qwen_ui.engine import awq
from qwen_ui.engine.awq import (
    Int4Linear,
    awq_settings,
    kernel_fits,
    kernel_scales_and_zeros,
)
from qwen_ui.engine.awq_format import dequantize, pack_columns, to_legacy_key, unpack_columns
from qwen_ui.engine.generate import Generation, Prompt, SamplingOptions, run
from qwen_ui.engine.loading import load_model
from tests.engine.support import awq_quantize

CPU = torch.device("cpu")


def test_pack_unpack_round_trip() -> None:
    values = torch.randint(0, 16, (256, 64), dtype=torch.int32)
    packed = pack_columns(values)
    assert packed.shape == (256, 8) and packed.dtype == torch.int32
    assert torch.equal(unpack_columns(packed), values)


def test_unpack_follows_the_awq_nibble_order() -> None:
    # AutoAWQ puts column order[i] into nibble i, order = [0, 2, 4, 6, 1, 3, 5, 7].
    word = sum(v << (4 * i) for i, v in enumerate([0, 2, 4, 6, 1, 3, 5, 7]))
    assert unpack_columns(torch.tensor([[word]], dtype=torch.int32)).tolist() == [list(range(8))]


def test_quantize_then_dequantize_is_close() -> None:
    weight = torch.randn(256, 256) * 0.05
    q, z, s = awq_quantize(weight)
    restored = dequantize(pack_columns(q), pack_columns(z), s, 128)
    step = s.float().max().item()
    assert (restored - weight).abs().max().item() <= step  # within one quantization step


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_int4_kernel_matches_dequantized_reference(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    weight = torch.randn(384, 256) * 0.05
    q, z, s = awq_quantize(weight)
    qweight, qzeros = pack_columns(q), pack_columns(z)
    bias = torch.randn(384)
    layer = Int4Linear.from_awq(qweight, qzeros, s, bias, 128, CPU, dtype)
    assert not layer.dequantized
    x = torch.randn(5, 256)
    reference = nn.functional.linear(x, dequantize(qweight, qzeros, s, 128), bias)
    out = layer(x.to(dtype)).float()
    assert out.dtype == torch.float32 and layer(x.to(dtype)).dtype == dtype
    cosine = nn.functional.cosine_similarity(out.flatten(), reference.flatten(), dim=0)
    assert cosine.item() >= 0.9999
    # the kernel computes in bf16 on every device: errors are bf16-sized, never scale-sized
    assert (out - reference).abs().max().item() < 0.05 * reference.abs().max().item()


def test_kernel_zero_point_derivation_is_exact() -> None:
    """torch's kernels compute ``(q - 8) * s + z'``; with ``z' = (8 - z) * s`` that is AWQ's
    ``(q - z) * s`` exactly (in float32, before the kernel's bf16 rounding)."""
    torch.manual_seed(1)
    weight = torch.randn(64, 256) * 0.05
    q, z, s = awq_quantize(weight)
    qweight, qzeros = pack_columns(q), pack_columns(z)
    sz = kernel_scales_and_zeros(qzeros, s, torch.float32)  # [k/g, n, 2]
    scale = sz[..., 0].repeat_interleave(128, 0)  # [k, n]
    zero = sz[..., 1].repeat_interleave(128, 0)
    kernel_weight = ((unpack_columns(qweight).float() - 8) * scale + zero).t()
    assert torch.allclose(kernel_weight, dequantize(qweight, qzeros, s, 128), atol=1e-6)


def test_shape_without_kernel_falls_back_to_dequantized() -> None:
    weight = torch.randn(24, 128) * 0.05  # 24 output features: the CPU kernel wants N % 16
    q, z, s = awq_quantize(weight)
    assert not kernel_fits(CPU, 24, 128, 128)
    layer = Int4Linear.from_awq(pack_columns(q), pack_columns(z), s, None, 128, CPU, torch.float32)
    assert layer.dequantized
    x = torch.randn(2, 128)
    expected = x @ dequantize(pack_columns(q), pack_columns(z), s, 128).t()
    assert torch.allclose(layer(x), expected, atol=1e-5)


def test_awq_settings_reads_the_config() -> None:
    from types import SimpleNamespace

    awq = {
        "quant_method": "awq",
        "bits": 4,
        "group_size": 128,
        "version": "gemm",
        "zero_point": True,
    }
    assert awq_settings(SimpleNamespace(quantization_config=awq)) == (128, True)
    with pytest.raises(ValueError):
        awq_settings(SimpleNamespace(quantization_config={"quant_method": "awq", "bits": 8}))
    assert awq_settings(object()) is None


# --- whole checkpoints --------------------------------------------------------------


@pytest.fixture(scope="module")
def awq_model(tiny_dirs: dict[str, Path]) -> Any:
    return load_model(tiny_dirs["awq"], CPU, torch.float32)


def dequantized_reference(model: Any, checkpoint: Path) -> Any:
    """The same model with every int4 layer replaced by a float linear dequantized straight
    from the checkpoint's qweight/qzeros/scales with AWQ's own formula."""
    import copy

    ref = copy.deepcopy(model)
    with safe_open(str(checkpoint / "model.safetensors"), "pt") as handle:
        for name, module in list(ref.named_modules()):
            if not isinstance(module, Int4Linear):
                continue
            base = to_legacy_key(name)
            weight = dequantize(
                *(handle.get_tensor(f"{base}.{leaf}") for leaf in ("qweight", "qzeros", "scales")),
                128,
            )
            linear = nn.Linear(module.in_features, module.out_features, bias=False)
            with torch.no_grad():
                linear.weight.copy_(weight)
            ref.set_submodule(name, linear)
    return ref


def test_checkpoint_uses_official_key_names(tiny_dirs: dict[str, Path]) -> None:
    with safe_open(str(tiny_dirs["awq"] / "model.safetensors"), "pt") as handle:
        keys = set(handle.keys())
    assert any(k.startswith("visual.blocks.") for k in keys)
    assert "model.layers.0.self_attn.q_proj.qweight" in keys
    assert "lm_head.weight" in keys
    config = json.loads((tiny_dirs["awq"] / "config.json").read_text())
    assert config["quantization_config"]["modules_to_not_convert"] == ["visual"]


def test_awq_model_keeps_layers_four_bit_and_vision_float(awq_model: Any) -> None:
    int4 = [m for m in awq_model.modules() if isinstance(m, Int4Linear)]
    assert len(int4) == 2 * 7  # 2 decoder layers × 7 linears
    assert all(not m.dequantized for m in int4)
    visual = awq_model.model.visual
    assert not any(isinstance(m, Int4Linear) for m in visual.modules())
    for name, param in visual.named_parameters():
        assert param.dtype == torch.float32 and torch.isfinite(param).all(), name
        if param.dim() >= 2:  # weights were random, biases zero
            assert param.abs().sum() > 0, name


def test_vision_tower_matches_the_checkpoint(awq_model: Any, tiny_dirs: dict[str, Path]) -> None:
    with safe_open(str(tiny_dirs["awq"] / "model.safetensors"), "pt") as handle:
        stored = handle.get_tensor("visual.blocks.0.attn.qkv.weight")
    assert torch.equal(awq_model.model.visual.blocks[0].attn.qkv.weight, stored.float())


def tiny_prompt(model: Any) -> Prompt:
    ids = torch.tensor([[1, 5, 9, 30, 40, 77, 120, 3, 8]])
    return Prompt(ids, torch.zeros_like(ids, dtype=torch.int32), None)


def test_int4_logits_and_greedy_tokens_match_dequantized_reference(
    awq_model: Any, tiny_dirs: dict[str, Path]
) -> None:
    reference = dequantized_reference(awq_model, tiny_dirs["awq"])
    assert not any(isinstance(m, Int4Linear) for m in reference.modules())
    prompt = tiny_prompt(awq_model)
    with torch.no_grad():
        a = awq_model(input_ids=prompt.input_ids).logits
        b = reference(input_ids=prompt.input_ids).logits
    cosine = nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0).item()
    assert cosine >= 0.999
    tokens = []
    for model in (awq_model, reference):
        got: list[int] = []
        run(
            Generation(model, tiny_prompt(model), SamplingOptions(12)),
            [],
            got.append,
            lambda: False,
        )
        tokens.append(got)
    assert tokens[0] == tokens[1] and len(tokens[0]) == 12


def tinygemm_pack(q: torch.Tensor, tiles: int) -> torch.Tensor:
    """The CUDA packing rule (``matrix_to_m16n8k16_Bint4_layout`` in PyTorch's int4mm.cu),
    written out in Python: lane ``t`` of block (n-tile, k-tile) holds row ``t // 4`` and
    bytes ``t % 4 (+4, +8, +12)`` of each pair of 16-wide k-tiles; high nibbles (even
    columns) in the low half of the int32, low nibbles (odd columns) in the high half."""
    n, k = q.shape
    as_bytes = (q[:, ::2] << 4 | q[:, 1::2]).long()  # [n, k / 2]
    out = torch.zeros(n // 8, k // (16 * tiles), 32, tiles // 2, dtype=torch.int64)
    for n_tile in range(n // 8):
        for k_tile in range(k // (16 * tiles)):
            for t in range(32):
                for pair in range(0, tiles, 2):
                    base = (k_tile * tiles + pair) * 8 + t % 4
                    v = as_bytes[n_tile * 8 + t // 4, [base, base + 4, base + 8, base + 12]]
                    word = sum(int(v[i] >> 4) << (4 * i) for i in range(4))
                    word += sum(int(v[i] & 0xF) << (16 + 4 * i) for i in range(4))
                    out[n_tile, k_tile, t, pair // 2] = word
    return torch.where(out >= 2**31, out - 2**32, out).to(torch.int32)


@pytest.mark.parametrize("tiles", [2, 4, 8])
def test_tinygemm_unpacking_inverts_the_kernels_packing_rule(
    tiles: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the CPU, against the packing rule written out; on the GPU,
    ``tests/engine/test_awq_cuda.py`` checks the same against the kernel's own packing."""
    monkeypatch.setattr(awq, "pack_for_cuda", tinygemm_pack)
    gather = awq.tile_gather.__wrapped__(torch.device("cpu"), tiles)  # uncached
    torch.manual_seed(tiles)
    q = torch.randint(0, 16, (16, 32 * tiles), dtype=torch.int32)
    assert torch.equal(awq.unpack_tinygemm(tinygemm_pack(q, tiles), gather), q)
    sz = torch.randn(32 * tiles // 32, 16, 2).to(torch.bfloat16)
    reference = awq.dequantize_for_kernel(pack_columns(q.t().contiguous()), sz, 32, torch.float32)
    dequantized = awq.dequantize_tinygemm(tinygemm_pack(q, tiles), gather, sz, 32, torch.float32)
    assert torch.equal(dequantized, reference)
