"""Dense copies of int4 weights: which rows take them, what they count, and (with a copy
handed in on the CPU) that a layer multiplies by it from its row count and by the int4
kernel below. The copies themselves and their timing are CUDA's (test_awq_cuda.py,
test_batching_gpu.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from transformers import AutoConfig

from qwen_ui.engine.awq import Int4Linear
from qwen_ui.engine.awq_format import pack_columns
from qwen_ui.engine.dense_weights import (
    config_copy_bytes,
    copy_bytes,
    crossover_rows,
    keep_dense_copies,
)
from qwen_ui.engine.facts import dense_copies, text_shape
from qwen_ui.engine.loading import load_model
from qwen_ui.engine.shapes import Placement
from tests.engine.support import awq_quantize

CPU = torch.device("cpu")
ROWS = (1, 2, 4, 8, 16)


@pytest.mark.parametrize(
    ("kernel", "dense", "expected"),
    [
        ([1, 2, 4, 5, 6], [3, 3, 3, 3, 3], 4),  # faster from 4 rows on
        ([1, 1, 1, 1, 1], [2, 2, 2, 2, 2], 0),  # never faster
        ([5, 5, 5, 5, 5], [1, 1, 1, 1, 1], 1),  # always faster
        ([1, 5, 1, 5, 5], [2, 2, 2, 2, 2], 8),  # a win below a loss does not count
        ([1, 2, 3, 4, 3], [2, 2, 2, 2, 3], 0),  # a tie at the largest: not faster there
    ],
)
def test_the_crossover_is_where_the_copy_wins_from_then_on(
    kernel: list[float], dense: list[float], expected: int
) -> None:
    assert crossover_rows(ROWS, kernel, dense) == expected


def int4_layer(out_features: int = 384, in_features: int = 256) -> Int4Linear:
    torch.manual_seed(0)
    q, z, s = awq_quantize(torch.randn(out_features, in_features) * 0.05)
    bias = torch.randn(out_features)
    return Int4Linear.from_awq(pack_columns(q), pack_columns(z), s, bias, 128, CPU, torch.float32)


def test_inputs_of_enough_rows_take_the_copy_fewer_the_kernel() -> None:
    layer = int4_layer()
    before = {rows: layer(torch.randn(rows, 256)) for rows in (1, 3, 4, 9)}
    copy = torch.randn(384, 256)  # not the layer's weight: which path ran shows
    layer.keep_dense(copy, 4)
    assert "dense from 4 rows" in repr(layer)
    for rows in (1, 3):
        x = torch.randn(rows, 256)
        kernel_out = layer(x)
        layer.dense_rows = 0
        assert torch.equal(kernel_out, layer(x))  # the kernel, as without a copy
        layer.dense_rows = 4
    for rows in (4, 9):
        x = torch.randn(rows, 256)
        rounded = x.to(torch.bfloat16).float()  # as the kernel takes its input
        expected = nn.functional.linear(rounded, copy, layer.bias)
        assert torch.equal(layer(x), expected)
        assert not torch.allclose(layer(x), before[rows], atol=1e-2)
    # rows are counted over every leading dimension: [2, 2, 256] is four rows
    assert torch.equal(layer(torch.ones(2, 2, 256))[0, 0], layer(torch.ones(4, 256))[0])
    layer.drop_dense()
    assert layer.dense_rows == 0 and not hasattr(layer, "dense")
    x = torch.randn(9, 256)
    kernel_only = int4_layer()  # the same weights, never given a copy
    assert torch.equal(layer(x), kernel_only(x))


def test_no_copies_off_cuda() -> None:
    layer = int4_layer()
    assert keep_dense_copies(nn.Sequential(layer), limit=1 << 40) == 0
    assert layer.dense_rows == 0 and not hasattr(layer, "dense")


def test_the_copies_bytes_from_the_config_match_the_loaded_layers(
    tiny_dirs: dict[str, Path],
) -> None:
    path = tiny_dirs["awq"]
    model = load_model(path, CPU, torch.float32)
    layers = [m for m in model.modules() if isinstance(m, Int4Linear)]
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    assert layers and config_copy_bytes(text_shape(config)) == copy_bytes(layers)
    nbytes = copy_bytes(layers)
    fits = Placement("cuda", False, 0, 0, dense_limit=nbytes)
    short = Placement("cuda", False, 0, 0, dense_limit=nbytes - 1)
    assert dense_copies(config, fits) == nbytes and dense_copies(config, short) == 0
    plain = AutoConfig.from_pretrained(tiny_dirs["bf16"], local_files_only=True)
    assert dense_copies(plain, fits) == 0  # no int4 weights, no copies
