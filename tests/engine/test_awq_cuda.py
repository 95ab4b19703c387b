"""The CUDA int4 path (``torch._weight_int4pack_mm``): run on the GPU machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from qwen_ui.engine.awq import (
    Int4Linear,
    dequantize_for_kernel,
    dequantize_tinygemm,
    pack_for_cuda,
    tile_gather,
    unpack_tinygemm,
)
from qwen_ui.engine.awq_format import dequantize, pack_columns
from qwen_ui.engine.dense_weights import ROWS, copy_bytes, dense_weight, keep_dense_copies
from qwen_ui.engine.generate import Generation, Prompt, SamplingOptions, run
from qwen_ui.engine.loading import load_model
from qwen_ui.engine.prefill import compile_prefill
from qwen_ui.engine.tinygemm_unpack import unpack_dequantize
from tests.engine.support import awq_quantize

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda() -> torch.device:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here")
    return torch.device("cuda")


def test_cuda_kernel_matches_dequantized_reference(cuda: torch.device) -> None:
    torch.manual_seed(0)
    weight = torch.randn(512, 1024) * 0.05
    q, z, s = awq_quantize(weight)
    qweight, qzeros = pack_columns(q), pack_columns(z)
    layer = Int4Linear.from_awq(qweight, qzeros, s, None, 128, cuda, torch.bfloat16)
    assert not layer.dequantized
    x = torch.randn(7, 1024)
    reference = x @ dequantize(qweight, qzeros, s, 128).t()
    out = layer(x.to(cuda, torch.bfloat16)).float().cpu()
    cosine = nn.functional.cosine_similarity(out.flatten(), reference.flatten(), dim=0)
    assert cosine.item() >= 0.999


@pytest.mark.parametrize("tiles", [2, 4, 8])
def test_the_kernels_packing_unpacks_exactly(cuda: torch.device, tiles: int) -> None:
    torch.manual_seed(tiles)
    q = torch.randint(0, 16, (48, 16 * tiles * 3), dtype=torch.int32, device=cuda)
    assert torch.equal(unpack_tinygemm(pack_for_cuda(q, tiles), tile_gather(cuda, tiles)), q)


def test_prefill_dequantizes_from_the_kernels_own_weight(cuda: torch.device) -> None:
    torch.manual_seed(1)
    q, z, s = awq_quantize(torch.randn(512, 1024) * 0.05)
    qweight, qzeros = pack_columns(q), pack_columns(z)
    layer = Int4Linear.from_awq(qweight, qzeros, s, None, 128, cuda, torch.bfloat16, 16)
    assert hasattr(layer, "tile_gather") and not hasattr(layer, "awq_qweight")  # no copy kept
    reference = dequantize_for_kernel(qweight.to(cuda), layer.scales_and_zeros, 128, torch.bfloat16)
    assert torch.equal(layer.dequantized_weight(torch.bfloat16), reference)


def test_cuda_awq_model_generates_like_cpu_reference(
    cuda: torch.device, tiny_dirs: dict[str, Path]
) -> None:
    gpu: Any = load_model(tiny_dirs["awq"], cuda, torch.bfloat16)
    assert all(not m.dequantized for m in gpu.modules() if isinstance(m, Int4Linear))
    ids = torch.tensor([[1, 5, 9, 30, 40, 77, 120, 3, 8]])
    with torch.no_grad():
        logits = gpu(input_ids=ids.to(cuda)).logits.float().cpu()
    cpu: Any = load_model(tiny_dirs["awq"], torch.device("cpu"), torch.float32)
    with torch.no_grad():
        expected = cpu(input_ids=ids).logits
    cosine = nn.functional.cosine_similarity(logits.flatten(), expected.flatten(), dim=0)
    assert cosine.item() >= 0.99  # bf16 activations vs float32
    tokens: list[int] = []
    prompt = Prompt(ids.to(cuda), torch.zeros_like(ids, dtype=torch.int32).to(cuda), None)
    run(Generation(gpu, prompt, SamplingOptions(8)), [], tokens.append, lambda: False)
    assert len(tokens) == 8


@pytest.mark.parametrize(
    ("tiles", "group", "k_tiles"), [(2, 32, 4), (4, 64, 4), (8, 128, 4), (8, 32, 4), (8, 128, 7)]
)
def test_triton_unpacking_is_the_eager_dequantize(
    cuda: torch.device, tiles: int, group: int, k_tiles: int
) -> None:
    """Bit for bit, from the kernel's own packing (the loader checks the same per shape)."""
    torch.manual_seed(tiles + group)
    n, k = 48, 16 * tiles * k_tiles
    q = torch.randint(0, 16, (n, k), dtype=torch.int32, device=cuda)
    packed, gather = pack_for_cuda(q, tiles), tile_gather(cuda, tiles)
    sz = (torch.randn(k // group, n, 2, device=cuda) * 0.05).to(torch.bfloat16)
    eager = dequantize_tinygemm(packed, gather, sz, group, torch.bfloat16)
    assert torch.equal(unpack_dequantize(packed, gather, sz, group, torch.bfloat16), eager)


def test_prefill_layers_take_the_triton_unpacking(cuda: torch.device) -> None:
    torch.manual_seed(2)
    q, z, s = awq_quantize(torch.randn(512, 1024) * 0.05)
    layer = Int4Linear.from_awq(
        pack_columns(q), pack_columns(z), s, None, 128, cuda, torch.bfloat16, 16
    )
    compile_prefill(nn.ModuleList([layer]))
    assert layer.dequantize_packed is unpack_dequantize


def test_dense_copies_multiply_as_the_kernel_from_the_measured_rows(cuda: torch.device) -> None:
    """A 7B-sized MLP pair: each layer gets a copy equal to the kernel's own weight, used
    from the row count timed for its shape; a too small limit keeps none."""
    torch.manual_seed(3)
    layers = []
    for out_features, in_features in ((4096, 1024), (1024, 4096)):
        q, z, s = awq_quantize(torch.randn(out_features, in_features) * 0.05)
        layers.append(
            Int4Linear.from_awq(
                pack_columns(q), pack_columns(z), s, None, 128, cuda, torch.bfloat16
            )
        )
    model = nn.Sequential(*layers)
    assert keep_dense_copies(model, copy_bytes(layers) - 1) == 0
    kept = keep_dense_copies(model, copy_bytes(layers))
    assert kept == sum(1 for layer in layers if layer.dense_rows)
    for layer in layers:
        weight = dense_weight(layer)
        assert weight is not None
        x = torch.randn(16, layer.in_features, device=cuda, dtype=torch.bfloat16)
        kernel = torch._weight_int4pack_mm(x, layer.packed, 128, layer.scales_and_zeros)
        cosine = nn.functional.cosine_similarity(
            nn.functional.linear(x, weight).float().flatten(), kernel.float().flatten(), dim=0
        )
        assert cosine.item() >= 0.9999
        assert layer.dense_rows in (0, *ROWS)
        print(f"{layer.out_features}x{layer.in_features}: dense from {layer.dense_rows} rows")


def test_triton_copies_multiply_as_the_kernel_from_the_measured_rows(cuda: torch.device) -> None:
    """7B-sized q/k/v and down shapes: each layer's Triton copy multiplies as torch's
    kernel does, and the layer sends the measured row range (or none) to it."""
    from qwen_ui.engine import triton_int4

    torch.manual_seed(4)
    layers = []
    for out_features, in_features in ((4608, 3584), (3584, 18944)):
        q, z, s = awq_quantize(torch.randn(out_features, in_features) * 0.05)
        layers.append(
            Int4Linear.from_awq(
                pack_columns(q), pack_columns(z), s, None, 128, cuda, torch.bfloat16
            )
        )
    kept = triton_int4.keep_copies(nn.Sequential(*layers))
    assert kept == sum(1 for layer in layers if layer.rows_from)
    for layer in layers:
        assert layer.rows_from in (0, *triton_int4.ROWS)
        print(f"{layer.out_features}x{layer.in_features}: Triton from {layer.rows_from} rows")
        if not layer.rows_from:
            continue
        assert layer.rows_to == triton_int4.MAX_ROWS
        for rows in (layer.rows_from, triton_int4.MAX_ROWS):
            x = torch.randn(rows, layer.in_features, device=cuda, dtype=torch.bfloat16)
            kernel = torch._weight_int4pack_mm(x, layer.packed, 128, layer.scales_and_zeros)
            cosine = nn.functional.cosine_similarity(
                layer(x).float().flatten(), kernel.float().flatten(), dim=0
            )
            assert cosine.item() >= 0.9999


@pytest.mark.parametrize("split_k", [1, 4])
def test_the_bf16_pair_dequantizing_multiplies_as_the_float_one(
    cuda: torch.device, split_k: int
) -> None:
    """The Triton kernel's two dequantizings (bf16 pairs by PTX, float32 weight by
    weight) give the dequantized weight's product, whole or split."""
    from qwen_ui.engine import triton_int4

    if not triton_int4.bf16_pairs(cuda):
        pytest.skip("bf16 pairs need sm_90")
    torch.manual_seed(5)
    n, k, group = 512, 1024, 128
    q = torch.randint(0, 16, (n, k), dtype=torch.int32)
    scales = torch.rand(k // group, n) * 0.02 + 0.001
    zeros = (8.0 - torch.randint(0, 16, (k // group, n))) * scales
    sz = torch.stack([scales, zeros], dim=-1).to(torch.bfloat16)
    per_k = sz.float().repeat_interleave(group, dim=0)
    weight = (q.t().float() - 8.0) * per_k[..., 0] + per_k[..., 1]  # [k, n]
    words = triton_int4.tile(triton_int4.pack(q), 64).to(cuda)
    for rows in (1, 8, 16):
        x = torch.randn(rows, k, dtype=torch.bfloat16)
        want = x.float() @ weight.to(torch.bfloat16).float()
        args = (x.to(cuda), words, sz.to(cuda), group, split_k, 64, 3)
        for pairs in (True, False):
            got = triton_int4.launch(*args, pairs=pairs).float().cpu()
            worst = float((got - want).abs().max() / want.abs().max())
            assert worst < 1e-2, (pairs, rows, worst)
