"""The estimate: sizes read from configs, its terms, and the total against the CPU
allocator's measured peak of real requests through the engine (tiny random model)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.profiler import ProfilerActivity, profile
from torch.profiler._memory_profiler import Action
from transformers import Qwen2_5_VLConfig, Qwen2VLConfig, Qwen3VLConfig

from qwen_ui.admission.estimate import (
    DEQUANT_WORK,
    DEQUANT_WORK_CUDA,
    WORKSPACE_BYTES,
    RequestShape,
    batch_peak,
    batch_total,
    cache_positions,
    decode_step,
    eager_prefill,
    estimate,
    graph_inputs,
    slot_batch_total,
    slot_count,
    step_rows,
)
from qwen_ui.admission.tokens import ImageGrid
from qwen_ui.engine.awq import dequantize_for_kernel
from qwen_ui.engine.awq_format import quantization_config
from qwen_ui.engine.engine import Engine
from qwen_ui.engine.facts import model_shape
from qwen_ui.engine.generate import decode_mode_for
from qwen_ui.store import ModelStore
from tests.admission.conftest import ask, collect, noise, start

QWEN25_7B = {
    "text_config": {
        "vocab_size": 152064,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
    },
    "vision_config": {
        "depth": 32,
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "out_hidden_size": 3584,
        "window_size": 112,
        "fullatt_block_indexes": [7, 15, 23, 31],
    },
}


KV_7B = 56 * 1024  # bytes per position of the 7B's KV cache (bf16)


def test_sizes_come_from_the_config() -> None:
    shape = model_shape(Qwen2_5_VLConfig(**QWEN25_7B), torch.bfloat16)
    # 28 layers x 4 KV heads x 128 dims x 2 (K, V) x 2 bytes
    assert shape.kv_bytes_per_token == 56 * 1024
    v = shape.vision
    assert (v.hidden, v.intermediate, v.heads, v.out_hidden) == (1280, 3420, 16, 3584)
    assert (v.patch_input, v.merge_unit, v.window_patches, v.full_blocks) == (1176, 4, 64, 4)
    assert shape.text.vocab == 152064 and shape.text.head_dim == 128
    assert model_shape(Qwen2_5_VLConfig(**QWEN25_7B), torch.float32).kv_bytes_per_token == (
        2 * 56 * 1024
    )


def test_qwen2_vl_vision_sizes() -> None:
    config = Qwen2VLConfig(
        text_config={"hidden_size": 1536, "num_attention_heads": 12, "num_key_value_heads": 2},
        vision_config={"embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "depth": 32},
    )
    v = model_shape(config, torch.bfloat16).vision
    assert (v.hidden, v.intermediate, v.window_patches, v.full_blocks) == (1280, 5120, 0, 32)
    assert v.out_hidden == 1536


QWEN3_8B = {  # Qwen3-VL-8B-Instruct's published sizes
    "text_config": {
        "vocab_size": 151936,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
    },
    "vision_config": {
        "depth": 27,
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_heads": 16,
        "out_hidden_size": 4096,
        "patch_size": 16,
        "deepstack_visual_indexes": [8, 16, 24],
    },
}


def test_qwen3_vl_sizes_and_deepstack_terms() -> None:
    """Qwen3-VL: no windows, 16-px patches, 144 KiB of keys/values per token, and three
    DeepStack layers whose features the prefill holds twice (handed in, concatenated) and
    the tower keeps as merged outputs."""
    shape = model_shape(Qwen3VLConfig(**QWEN3_8B), torch.bfloat16)
    v = shape.vision
    assert (v.patch_input, v.window_patches, v.full_blocks, v.deepstack_layers) == (
        3 * 2 * 16 * 16,
        0,
        27,
        3,
    )
    assert shape.kv_bytes_per_token == 2 * 36 * 8 * 128 * 2 == 144 * 1024
    flat = replace(shape, vision=replace(v, deepstack_layers=0))
    request = RequestShape([grid(32)], 1024, 60, 256)
    with_ds, without = estimate(request, shape), estimate(request, flat)
    assert with_ds.prefill - without.prefill == 2 * 3 * 1024 * 4096 * 2
    assert with_ds.vision - without.vision == 3 * 1024 * 4096 * 2


def grid(tokens_side: int) -> ImageGrid:
    return ImageGrid(1, 2 * tokens_side, 2 * tokens_side, 2)


def test_terms_grow_with_the_request() -> None:
    shape = model_shape(Qwen2_5_VLConfig(**QWEN25_7B), torch.bfloat16)
    one = estimate(RequestShape([grid(36)], 1296, 60, 512), shape)
    eight = estimate(RequestShape([grid(36)] * 8, 8 * 1296, 60, 512), shape)
    longer = estimate(RequestShape([grid(36)], 1296, 60, 8192), shape)
    assert eight.prefill > one.prefill and eight.vision == one.vision  # encoded one by one
    assert longer.decode > one.decode and longer.prefill == one.prefill
    assert one.parts["kv_cache"] == (1296 + 60 + 512) * 56 * 1024
    assert eight.total == eight.peak + eight.workspace and eight.workspace > WORKSPACE_BYTES
    assert eight.peak_phase == "prefill" and longer.peak_phase in ("decode", "prefill")


def test_static_caches_count_their_whole_length() -> None:
    config = Qwen2_5_VLConfig(**QWEN25_7B)
    grown, static = (
        model_shape(config, torch.bfloat16),
        model_shape(config, torch.bfloat16, cache_bucket=256),
    )
    request = RequestShape([], 0, 172, 1024)  # 1196 positions; a static cache holds 1280
    extra = estimate(request, static).decode - estimate(request, grown).decode
    per_token = 56 * 1024 + 2 * 28 * 128 * 2  # the cache + one layer's expanded K and V
    assert extra == (1280 - 1196) * per_token


def test_dequantizing_prefill_counts_the_largest_layer() -> None:
    awq = Qwen2_5_VLConfig(**QWEN25_7B, quantization_config=quantization_config())
    plain = model_shape(awq, torch.bfloat16, "cpu")
    dequant = model_shape(awq, torch.bfloat16, "cpu", dequant_rows=256)
    long, short = RequestShape([], 0, 1000, 1), RequestShape([], 0, 200, 1)
    extra = estimate(long, dequant).prefill - estimate(long, plain).prefill
    assert extra == 3584 * 18944 * DEQUANT_WORK * 2  # gate/up/down, bf16
    assert estimate(short, dequant).prefill == estimate(short, plain).prefill
    fused = model_shape(awq, torch.bfloat16, "cpu", dequant_rows=256, fused_projections=True)
    fused_plain = model_shape(awq, torch.bfloat16, "cpu", fused_projections=True)
    doubled = estimate(long, fused).prefill - estimate(long, fused_plain).prefill
    assert doubled == 2 * extra  # gate and up dequantized as one weight
    # on CUDA the compiled dequantize leaves only the bf16 weight it writes
    cuda = model_shape(awq, torch.bfloat16, "cuda", dequant_rows=256, fused_projections=True)
    cuda_plain = model_shape(awq, torch.bfloat16, "cuda", fused_projections=True)
    on_cuda = estimate(long, cuda).prefill - estimate(long, cuda_plain).prefill
    assert on_cuda == 2 * 3584 * 18944 * DEQUANT_WORK_CUDA * 2
    bf16_model = Qwen2_5_VLConfig(**QWEN25_7B)  # not AWQ: the setting does nothing
    assert model_shape(bf16_model, torch.bfloat16, dequant_rows=256).dequant_rows == 0


@pytest.mark.parametrize("fuse", [False, True])
def test_mlp_term_is_the_mlp_peak(fuse: bool) -> None:
    """The prefill MLP term against the profiler's peak of transformers' Qwen2 MLP, as
    loaded (separate gate/up) and with the engine's fused gate/up (the fused output stays
    whole while ``up``, a view of it, is alive: one more ``[L, intermediate]``)."""
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2MLP

    from qwen_ui.admission.estimate import _decoder_mlp
    from qwen_ui.engine import fused

    config = Qwen2_5_VLConfig(text_config={"hidden_size": 256, "intermediate_size": 1024})
    mlp = Qwen2MLP(config.text_config).eval()
    length, x = 512, torch.randn(1, 512, 256)
    with torch.inference_mode():
        if fuse:
            gate_up = torch.nn.Linear(256, 2048, bias=False)
            gate_up.weight.copy_(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))
            group = fused.Group("", "gate_up_proj", fused.GATE_UP)
            fused.install(mlp, group, gate_up, [1024, 1024])
        with profile(
            activities=[ProfilerActivity.CPU],
            profile_memory=True,
            record_shapes=True,
            with_stack=True,
        ) as prof:
            out = mlp(x)
            del out
    shape = model_shape(config, torch.float32)
    term = _decoder_mlp(length, shape.text, 4, fuse) - length * 2 * 256 * 4  # minus residual, input
    assert _peak(prof) == term


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dequant_work_is_the_dequantize_peak(dtype: torch.dtype) -> None:
    """DEQUANT_WORK against the profiler's peak of the engine's own dequantize."""
    k, n, group = 512, 1024, 128
    qweight = torch.randint(-(2**31), 2**31 - 1, (k, n // 8), dtype=torch.int32)
    scales_and_zeros = torch.randn(k // group, n, 2).to(torch.bfloat16)
    activities = [ProfilerActivity.CPU]
    with profile(
        activities=activities, profile_memory=True, record_shapes=True, with_stack=True
    ) as prof:
        del_me = dequantize_for_kernel(qweight, scales_and_zeros, group, dtype)
        del del_me
    bound = DEQUANT_WORK * torch.empty((), dtype=dtype).element_size() * k * n
    assert 0.8 * bound <= _peak(prof) <= bound


def test_decode_mode_follows_the_setting_and_the_device() -> None:
    assert decode_mode_for("auto", "cuda") == "static"
    assert decode_mode_for("auto", "cpu") == "eager"
    assert decode_mode_for("static", "cpu") == "static"
    assert decode_mode_for("eager", "cuda") == "eager"


def test_eager_attention_adds_score_matrices() -> None:
    config = Qwen2_5_VLConfig(**QWEN25_7B)
    sdpa = model_shape(config, torch.bfloat16)
    config._attn_implementation = "eager"
    eager = model_shape(config, torch.bfloat16)
    request = RequestShape([grid(40)], 1600, 10, 1)
    n = grid(40).patches
    extra = estimate(request, eager).vision - estimate(request, sdpa).vision
    assert extra == 16 * n * n * (2 * 2 + 4)  # full-attention blocks: heads × n × n


def _defaults_7b(graph_rows: int = 4096) -> Any:
    """The 7B AWQ shape as the engine serves it on CUDA by default: static caches of
    256-position steps, fused projections, dequantized long prefills, recorded prefills."""
    awq = Qwen2_5_VLConfig(**QWEN25_7B, quantization_config=quantization_config())
    return model_shape(awq, torch.bfloat16, "cuda", 256, 256, True, graph_rows)


def test_static_cache_is_allocated_whole_before_the_prefill() -> None:
    shape = _defaults_7b(graph_rows=0)
    request = RequestShape([], 0, 300, 400)  # 700 positions: a 768-position cache
    assert cache_positions(request, shape) == 768
    grown = replace(shape, cache_bucket=0)
    assert cache_positions(request, grown) == 700
    static, dynamic = estimate(request, shape).prefill, estimate(request, grown).prefill
    assert static - dynamic == (768 - 300) * 56 * 1024  # the rest of the cache's length


def test_replayed_prefill_adds_only_its_inputs() -> None:
    shape = _defaults_7b()
    request = RequestShape([grid(28)], 784, 100, 512)  # 884 prompt tokens, replayed
    kv = 56 * 1024 * cache_positions(request, shape)
    replayed = estimate(request, shape).prefill
    eager = estimate(request, replace(shape, graph_rows=0)).prefill
    inputs = (2 * 884 + 2 * 784) * 3584 * 2  # embeddings, scattered copy, features x 2
    assert kv + inputs < replayed < kv + inputs + 20 * 2**20  # + positions and logits
    assert eager - replayed > 3584 * 2 * 18944 * 2  # the dequantized gate/up weight and more
    longer = RequestShape([grid(72)] * 2, 2 * 5184, 100, 64)  # past 4096 rows: eager
    assert estimate(longer, shape).prefill == estimate(longer, replace(shape, graph_rows=0)).prefill


def test_batch_of_one_is_the_request() -> None:
    shape = _defaults_7b()
    for request in (
        RequestShape([grid(28)], 784, 100, 512),
        RequestShape([grid(72)] * 2, 2 * 5184, 100, 64),
        RequestShape([], 0, 50, 2048),
    ):
        assert batch_total([request], shape) == estimate(request, shape).total


def test_batch_holds_every_cache_and_one_newcomer() -> None:
    shape = _defaults_7b()
    one = RequestShape([grid(28)], 784, 100, 512)
    kv = 56 * 1024 * cache_positions(one, shape)
    single = estimate(one, shape)
    for n in (2, 8, 32):
        batch = batch_peak([one] * n, shape)
        assert batch >= n * kv + (single.peak - kv)  # every cache, one newcomer's work
        assert batch < n * single.peak  # the transients are not reserved n times
    mixed = [one, RequestShape([grid(72)], 5184, 100, 64)]
    assert batch_peak(mixed, shape) > batch_peak([one, one], shape)
    assert batch_total([], shape) == 0


# --- measured on the CPU ---------------------------------------------------------------


async def _on_worker(engine: Engine, fn: Callable[[], Any]) -> None:
    job = engine.worker.submit(lambda _job: fn())
    async for _ in job.events():
        pass


def _peak(prof: Any) -> int:
    live = peak = 0
    for _t, action, _key, size in prof._memory_profile().timeline:
        live += size if action == Action.CREATE else -size if action == Action.DESTROY else 0
        peak = max(peak, live)
    return peak


@pytest.mark.parametrize("revision", ["bf16", "awq"])  # awq: int4, fused projections
async def test_estimate_covers_the_measured_peak(
    tmp_path: Path, tiny_store: ModelStore, revision: str
) -> None:
    """The allocator's peak on the engine's worker thread (the profiler records one
    thread) for a vision-dominated and a prefill-dominated request. (The decode phase of
    this tiny model is too small to measure against the fixed workspace; the GPU bench
    covers long answers on the full-size architecture.)"""
    w = await start(
        tmp_path, tiny_store, revision=revision, max_pixels=896 * 896, max_new_tokens_limit=4096
    )
    cases = [
        ([(896, 672)], 2),  # one large image: the vision tower
        ([(448, 448), (640, 480), (896, 600)], 2),  # many image tokens: prefill
    ]
    try:
        assert (await collect(w.engine, ask([noise((64, 64), 0)])))[-1].type == "done"
        for i, (sizes, max_new) in enumerate(cases):
            request = ask([noise(s, 20 + i) for s in sizes], max_new_tokens=max_new)
            sized = await w.size(request, sizes)
            prof = profile(
                activities=[ProfilerActivity.CPU],
                profile_memory=True,
                record_shapes=True,
                with_stack=True,
            )
            await _on_worker(w.engine, prof.__enter__)
            done = (await collect(w.engine, request))[-1]
            await _on_worker(w.engine, lambda p=prof: p.__exit__(None, None, None))
            measured = _peak(prof)
            total = sized.estimate.total
            assert done.type == "done" and measured > 0
            assert measured <= total <= 1.3 * measured + WORKSPACE_BYTES, (i, measured, total)
    finally:
        await w.engine.close()


def _batching_7b(limit: int = 8, graphs: bool = True) -> Any:
    """The 7B AWQ shape with continuous batching (``max_batch``)."""
    return replace(_defaults_7b(graph_rows=0), batch_limit=limit, batch_graphs=graphs)


def test_slot_counts_follow_the_batch() -> None:
    graphed, eager = _batching_7b(8, True), _batching_7b(8, False)
    assert [slot_count(n, graphed) for n in (1, 2, 5, 8)] == [8, 8, 8, 8]
    assert [slot_count(n, eager) for n in (1, 2, 3, 5, 8)] == [1, 2, 4, 8, 8]


def test_a_batched_request_holds_every_slot_at_its_length() -> None:
    shape = _batching_7b()
    request = RequestShape([grid(28)], 784, 100, 512)  # 1,396 positions: 1,536 per slot
    one = estimate(request, shape)
    assert one.parts["kv_cache"] == 8 * 1536 * 56 * 1024  # all eight slots, from the start
    assert one.decode > one.parts["kv_cache"] and one.prefill > 884 * 56 * 1024
    assert batch_total([request], shape) == one.total
    alone = estimate(request, _defaults_7b(graph_rows=0))
    assert one.total > alone.total  # the seven idle slots are memory too


def test_a_batch_grows_with_its_longest_sequence_and_joint_prefill() -> None:
    shape = _batching_7b()
    short = RequestShape([grid(28)], 784, 100, 512)
    long = RequestShape([grid(28)], 784, 100, 4096)
    assert batch_peak([short, long], shape) > batch_peak([short, short], shape)
    assert batch_peak([short] * 8, shape) > batch_peak([short] * 2, shape)  # joint prefill
    # eight sequences share the slots a lone one already holds: less than 8 lone ones,
    # although eight prompts prefilled together hold eight prompts' activations
    assert batch_peak([short] * 8, shape) < 4 * estimate(short, shape).peak


def test_a_replayed_step_computes_its_rows_bucket_not_every_slot() -> None:
    shape = _batching_7b(16, True)
    assert [step_rows(n, shape) for n in (1, 2, 3, 9, 16)] == [1, 2, 4, 16, 16]
    assert [step_rows(n, _batching_7b(16, False)) for n in (1, 3, 9)] == [1, 3, 9]
    request = RequestShape([grid(28)], 784, 100, 1164)  # a 2,048-position slot
    one = estimate(request, shape)
    per_row = decode_step(RequestShape(text_tokens=2048), replace(shape, cache_bucket=0))
    assert one.decode == one.parts["kv_cache"] + per_row  # one row, not sixteen


def test_a_lone_replayed_prefill_holds_no_keys_of_its_own() -> None:
    """Its keys and values are staged in the recorded graphs' pool (out of the budget)
    and copied into the slots: its prefill phase is the slot cache and its inputs."""
    shape = replace(_defaults_7b(), batch_limit=16, batch_graphs=True)
    request = RequestShape([grid(28)], 784, 100, 1164)
    one = estimate(request, shape)
    assert one.prefill == one.parts["kv_cache"] + graph_inputs(request, shape)
    eager = estimate(request, replace(shape, graph_rows=0))
    assert eager.prefill == one.parts["kv_cache"] + 884 * 56 * 1024  # the prompt's keys too


def test_newcomers_beside_a_running_batch_are_bounded_by_the_join_chunk() -> None:
    """Eight newcomers: together into an idle batch they are prefilled in one pass and
    the slots made after; beside a running one (at worst seven of them, the running one's
    recorded step in its graph pool) the chunk bounds the pass's activations and their
    images go through the tower one at a time."""
    one_pass = replace(_defaults_7b(), batch_limit=16, batch_graphs=True)
    chunked = replace(one_pass, join_chunk=1536)
    request = RequestShape([grid(32)] * 2, 2048, 60, 2048)  # a 4,096-position slot each
    cache = 16 * 4096 * 56 * 1024
    prompts = 8 * 2108 * 56 * 1024
    step = decode_step(RequestShape(text_tokens=4096), replace(chunked, cache_bucket=0))
    assert batch_peak([request] * 8, chunked) < batch_peak([request] * 8, one_pass)
    assert cache + prompts < batch_peak([request] * 8, chunked) < cache + prompts + step + 2**30
    assert batch_peak([request], chunked) == batch_peak([request], one_pass)  # alone


def test_replayed_steps_stay_allocated_beside_a_chunked_join() -> None:
    """Fifteen answers with long caches decode (replayed steps of 16 rows, whose
    transients stay allocated in the graphs' pool) while a newcomer too long for one
    chunk joins: the pool, its keys and values and a chunk's activations together, beside
    the cache; more than the batch decoding or all its members prefilled together."""
    shape = replace(_batching_7b(16, True), join_chunk=1536)
    running = RequestShape([], 0, 50, 8000)  # 8,050 positions: 8,192 per slot
    newcomer = RequestShape([], 0, 1600, 64)  # 1,600 prompt tokens: two chunks
    per_row = decode_step(RequestShape(text_tokens=8192), replace(shape, cache_bucket=0))
    cache, keys = 16 * 8192 * KV_7B, 1600 * KV_7B
    chunk = eager_prefill(1600, 0, shape, chunk=1536)
    beside = cache + 16 * per_row + keys + chunk
    peak = batch_peak([running] * 15 + [newcomer], shape)
    assert beside <= peak < beside + 2**30
    assert cache + max(16 * per_row, 16 * keys) + chunk < beside  # decoding; all prefilled


def test_a_cache_left_by_departed_answers_stays_beside_the_newcomers() -> None:
    """The answer that made the batch's 8,192-position cache left while a newcomer waited:
    none running, the newcomer's prompt (too long to replay) passes in one go beside that
    cache, which the busy batch keeps. With no one gone, a lone newcomer's prefill comes
    before the slots are made."""
    shape = replace(_defaults_7b(), batch_limit=16, batch_graphs=True, join_chunk=1536)
    newcomer = RequestShape([grid(72)], 5184, 100, 64)  # 5,284 prompt tokens, 5,376 per slot
    cache, keys = 16 * 8192 * KV_7B, 5284 * KV_7B
    pass_work = eager_prefill(5284, 5184, shape)
    left = slot_batch_total([newcomer], shape, rows=2, longest=8192)
    assert left > cache + keys + pass_work
    assert slot_batch_total([newcomer], shape) < 16 * 5376 * KV_7B + keys + pass_work


def test_batching_placement_and_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from qwen_ui.admission.budget import graph_reserve, pool_reserve
    from qwen_ui.engine import facts
    from qwen_ui.settings import Settings

    settings = Settings(home=tmp_path)
    monkeypatch.setattr(facts, "batch_limit", lambda _settings: 8)
    where = facts.placement(settings, torch.device("cuda"))
    assert (where.batch_limit, where.batch_graphs, where.static_decode) == (8, True, False)
    # the recorded prefills of newcomers that join alone, out of the budget
    assert where.graph_rows == 4096 and graph_reserve(where, _defaults_7b()) > 0
    assert pool_reserve(settings, where) == settings.static_cache_pool_bytes  # idle slots
    cpu = facts.placement(settings, torch.device("cpu"))
    assert (cpu.batch_limit, cpu.batch_graphs, cpu.graph_rows) == (8, False, 0)


async def _answered(engine: Engine, request: Any, streaming: asyncio.Event) -> str:
    """Ask; ``streaming`` is set at the first token. The last event's type."""
    last = ""
    async for event in engine.ask(request):
        last = event.type
        if event.type == "token":
            streaming.set()
    streaming.set()
    return last


async def test_a_batch_reservation_covers_its_measured_peak(
    tmp_path: Path, tiny_store: ModelStore
) -> None:
    """A long answer streams; two newcomers of other lengths (one large image, two
    images) join its continuous batch. The most the controller held at once (the batch's
    shared reservation) against the allocator's peak on the worker thread meanwhile."""
    w = await start(tmp_path, tiny_store, max_pixels=896 * 896, max_new_tokens_limit=4096)
    first = ask([noise((320, 240), 40)], max_new_tokens=200)  # a 512-position slot
    joining = [
        ask([noise((896, 672), 41)], max_new_tokens=2),
        ask([noise((448, 448), 42), noise((640, 480), 43)], max_new_tokens=40),
    ]
    try:
        assert (await collect(w.engine, ask([noise((64, 64), 0)])))[-1].type == "done"
        w.controller.max_in_use = 0
        prof = profile(
            activities=[ProfilerActivity.CPU],
            profile_memory=True,
            record_shapes=True,
            with_stack=True,
        )
        await _on_worker(w.engine, prof.__enter__)
        streaming = asyncio.Event()
        running = asyncio.create_task(_answered(w.engine, first, streaming))
        await streaming.wait()
        later = [_answered(w.engine, r, asyncio.Event()) for r in joining]
        ends = await asyncio.gather(running, *later)
        await _on_worker(w.engine, lambda: prof.__exit__(None, None, None))
        measured, reserved = _peak(prof), w.controller.max_in_use
        assert ends == ["done"] * 3 and w.controller.in_use == 0
        assert w.controller.max_inflight[first.tenant] == 3  # they ran together
        assert measured <= reserved <= 1.3 * measured + WORKSPACE_BYTES, (measured, reserved)
    finally:
        await w.engine.close()
