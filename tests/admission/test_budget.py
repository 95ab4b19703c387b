"""The request budget: device limit, resident weights, and the static-cache pool's share."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch
from transformers import Qwen2_5_VLConfig, Qwen3VLConfig

from qwen_ui.admission.budget import (
    WEIGHT_OVERHEAD,
    expected_weights,
    graph_reserve,
    pool_reserve,
    request_budget,
)
from qwen_ui.admission.estimate import eager_prefill
from qwen_ui.engine.facts import (
    dense_copies,
    model_shape,
    placement,
    triton_copies,
    weight_copies,
)
from qwen_ui.engine.shapes import Geometry, ModelFacts
from qwen_ui.settings import Settings
from tests.admission.test_estimate import QWEN3_8B, QWEN25_7B

MiB = 1024 * 1024
CPU = torch.device("cpu")
CUDA = torch.device("cuda")  # only named: nothing here touches a GPU
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
GiB = 1024 * MiB
GEOMETRY = Geometry(14, 2, 2, 3136, 1_003_520)


def settings(home: Path, **values: object) -> Settings:
    """One request at a time (``max_batch=1``): the budget's own rules, without a batch's
    idle slot cache (tests/admission/test_estimate.py covers that)."""
    values = {"max_batch": 1, **values}
    return Settings(home=home, cpu_budget_bytes=512 * MiB, **values)  # type: ignore[arg-type]


def test_the_cpu_budget_is_the_configured_bytes(tmp_path: Path) -> None:
    config = settings(tmp_path)
    assert request_budget(config, placement(config, CPU), None, 10 * MiB) == 512 * MiB


def test_static_decoding_keeps_the_cache_pool_out_of_the_budget(tmp_path: Path) -> None:
    static = settings(tmp_path, decode_mode="static", static_cache_pool_bytes=100 * MiB)
    assert pool_reserve(static, placement(static, CPU)) == 100 * MiB
    assert request_budget(static, placement(static, CPU), None, 0) == 412 * MiB
    auto = settings(tmp_path, decode_mode="auto", static_cache_pool_bytes=100 * MiB)
    assert pool_reserve(auto, placement(auto, CPU)) == 0  # auto is eager on the CPU: no pool
    huge = settings(tmp_path, decode_mode="static", static_cache_pool_bytes=600 * MiB)
    assert request_budget(huge, placement(huge, CPU), None, 0) == 0


def test_recorded_prefills_are_kept_out_of_the_budget(tmp_path: Path) -> None:
    """The staging keys/values and the pool of the longest bucket (4,000 rows round up to
    4,032 on the 7B architecture: 56 KiB of keys/values per row, beside a 4,032-token
    prefill's transients)."""
    shape = model_shape(Qwen2_5_VLConfig(**QWEN25_7B), torch.bfloat16)
    on = settings(
        tmp_path,
        vram_budget=40 * GiB,
        decode_mode="auto",
        static_cache_pool_bytes=0,
        prefill_graph_rows=4000,
    )
    reserve = graph_reserve(placement(on, CUDA), shape)
    staging = shape.kv_bytes_per_token * 4032
    assert shape.kv_bytes_per_token == 56 * 1024
    # the pool's transients, and as much again for the eager pass before each recording
    assert reserve == staging + 2 * eager_prefill(4032, 0, shape)
    assert request_budget(on, placement(on, CUDA), 8 * GiB, 0, shape) == 32 * GiB - reserve
    assert request_budget(on, placement(on, CUDA), 8 * GiB, 0) == 32 * GiB  # shape unknown
    off = settings(tmp_path, vram_budget=40 * GiB, decode_mode="auto", prefill_graph_rows=0)
    assert graph_reserve(placement(off, CUDA), shape) == 0
    assert graph_reserve(placement(on, CPU), shape) == 0  # never recorded on the CPU
    eager = settings(tmp_path, decode_mode="eager", prefill_graph_rows=4000)
    assert graph_reserve(placement(eager, CUDA), shape) == 0  # they need static decoding


def test_recorded_prefills_of_qwen3_keep_their_deepstack_buffer(tmp_path: Path) -> None:
    shape = model_shape(Qwen3VLConfig(**QWEN3_8B), torch.bfloat16)
    on = settings(tmp_path, decode_mode="auto", static_cache_pool_bytes=0, prefill_graph_rows=1024)
    flat = replace(shape, vision=replace(shape.vision, deepstack_layers=0))
    extra = graph_reserve(placement(on, CUDA), shape) - graph_reserve(placement(on, CUDA), flat)
    assert extra == 3 * 1024 * 4096 * 2  # three layers x rows x hidden, bf16


def test_dense_copies_count_with_the_weights_until_measured(tmp_path: Path) -> None:
    """Before loading, the weights count as the checkpoint (with the kernel's overhead)
    plus the dense copies of the 7B architecture's int4 weights the engine will keep."""
    config = Qwen2_5_VLConfig(**QWEN25_7B)
    shape = model_shape(config, torch.bfloat16)
    on = settings(tmp_path, vram_budget=60 * GiB, static_cache_pool_bytes=0)
    where = replace(placement(on, CUDA), dense_limit=15 * GiB)
    config.quantization_config = AWQ
    copies = dense_copies(config, where)
    assert copies == 2 * 28 * (3584 * (3584 + 2 * 512) + 3584 * 3584 + 3 * 3584 * 18944)
    facts = ModelFacts("s", shape, GEOMETRY, 5 * GiB, copies)
    assert expected_weights(facts) == int(5 * GiB * WEIGHT_OVERHEAD) + copies
    # (without the shape: no recorded prefills' reserve)
    assert request_budget(on, where, None, expected_weights(facts)) == 60 * GiB - (
        expected_weights(facts)
    )
    assert request_budget(on, where, 20 * GiB, expected_weights(facts)) == 40 * GiB  # measured
    assert dense_copies(config, replace(where, dense_limit=copies - 1)) == 0


def test_triton_copies_count_with_the_weights_where_batches_run_on_cuda(tmp_path: Path) -> None:
    """With continuous batching on CUDA (the default ``triton_int4=auto``) the Triton int4
    kernel's copies count half a byte per int4 weight of the 7B architecture; one request
    at a time, the CPU or the setting off keep none."""
    config = Qwen2_5_VLConfig(**QWEN25_7B)
    plain = Qwen2_5_VLConfig(**QWEN25_7B)
    config.quantization_config = AWQ
    batching = settings(tmp_path, max_batch=8)
    where = placement(batching, CUDA)
    assert where.triton_int4
    weights = 28 * (3584 * (3584 + 2 * 512) + 3584 * 3584 + 3 * 3584 * 18944)
    assert triton_copies(config, where) == weights // 2
    assert weight_copies(config, where) == weights // 2  # no dense copies by default
    assert weight_copies(config, replace(where, dense_limit=16 * GiB)) == weights // 2 * 5
    assert triton_copies(plain, where) == 0  # no int4 weights, no copies
    assert not placement(settings(tmp_path), CUDA).triton_int4  # max_batch=1
    assert not placement(settings(tmp_path, max_batch=8, triton_int4=False), CUDA).triton_int4
    assert not placement(batching, torch.device("cpu")).triton_int4
