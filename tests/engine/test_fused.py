"""Fused int4 projections (``qwen_ui.engine.fused``): the same logits and greedy tokens as
the separate q/k/v and gate/up layers, for Qwen2.5-VL, Qwen2-VL and Qwen3-VL (per-head q/k
norms) AWQ checkpoints."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image

from qwen_ui.engine import fused as fused_module
from qwen_ui.engine.awq import Int4Linear
from qwen_ui.engine.engine import Engine
from qwen_ui.engine.fused import decode_attention, packed_decode_attention
from qwen_ui.engine.generate import (
    CachePool,
    DecodeMode,
    Generation,
    SamplingOptions,
    run,
)
from qwen_ui.engine.pipelines import Loaded, ModelSpec, Pipelines, Turn
from qwen_ui.engine.status import EngineStatus
from qwen_ui.settings import Settings
from qwen_ui.state import MemoryState
from qwen_ui.store import ModelStore
from tests.engine.conftest import TINY_ID, tiny_settings
from tests.engine.support import build_family_model, prefill_logits, write_awq_checkpoint

IMAGES = [Image.new("RGB", (100, 80), (255, 0, 0)), Image.effect_noise((90, 90), 60).convert("RGB")]


def load(store: ModelStore, model_id: str, fuse: bool, prefill_rows: int = 0) -> Loaded:
    spec = ModelSpec(model_id, "awq", "cpu", 3136, 112 * 112, prefill_rows, "batched", fuse)
    return Pipelines(store, spec, EngineStatus()).load()


def family_store(family: str, tmp: pytest.TempPathFactory) -> ModelStore:
    plain = build_family_model(family, tmp.mktemp(family) / "plain")
    awq = write_awq_checkpoint(plain, tmp.mktemp(family) / "awq")
    store = ModelStore(tmp.mktemp("store"))
    store.install(awq, f"test/{family}", "awq")
    return store


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen2_vl", "qwen3_vl"])
def pair(
    request: pytest.FixtureRequest, tiny_store: ModelStore, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Loaded, Loaded]:
    if request.param == "qwen2_5_vl":
        return load(tiny_store, TINY_ID, False), load(tiny_store, TINY_ID, True)
    family = str(request.param)
    store = family_store(family, tmp_path_factory)
    return load(store, f"test/{family}", False), load(store, f"test/{family}", True)


def int4_layers(loaded: Loaded) -> list[str]:
    model = loaded.language.model
    return [n for n, m in model.named_modules() if isinstance(m, Int4Linear)]


def test_seven_int4_layers_per_decoder_layer_become_four(pair: tuple[Loaded, Loaded]) -> None:
    plain, fused = (int4_layers(p) for p in pair)
    layers = pair[0].language.model.config.get_text_config().num_hidden_layers
    assert len(plain) == 7 * layers and len(fused) == 4 * layers
    assert sum(n.endswith(".qkv_proj") for n in fused) == layers
    assert sum(n.endswith(".gate_up_proj") for n in fused) == layers
    assert not any(n.endswith((".q_proj", ".k_proj", ".gate_proj")) for n in fused)


def test_prefill_logits_are_the_same(pair: tuple[Loaded, Loaded]) -> None:
    plain, fused = (prefill_logits(p, IMAGES) for p in pair)
    assert torch.allclose(plain, fused, rtol=0, atol=1e-5), float((plain - fused).abs().max())


def greedy(loaded: Loaded, mode: DecodeMode, step: Callable[..., Any] | None = None) -> list[int]:
    embeddings = [loaded.vision.encode(i) for i in IMAGES[:1]]
    turns = [Turn("How many squares?", 1, "two"), Turn("And circles?", 0)]
    prompt = loaded.language.build_prompt(turns, embeddings)
    model = loaded.language.model
    pool = CachePool(model) if mode == "static" else None
    tokens: list[int] = []
    generation = Generation(model, prompt, SamplingOptions(16), mode, pool, step)
    run(generation, [], tokens.append, bool)
    return tokens


@pytest.mark.parametrize("mode", ["eager", "static"])
def test_greedy_tokens_are_the_same(pair: tuple[Loaded, Loaded], mode: DecodeMode) -> None:
    assert greedy(pair[0], mode) == greedy(pair[1], mode)


def test_fused_layers_keep_the_dequantized_prefill(tiny_store: ModelStore) -> None:
    fused = load(tiny_store, TINY_ID, True, prefill_rows=16)
    qkv = [m for n, m in fused.language.model.named_modules() if n.endswith("qkv_proj")]
    assert qkv and all(isinstance(m, Int4Linear) and m.prefill_rows == 16 for m in qkv)
    plain = load(tiny_store, TINY_ID, False, prefill_rows=16)
    assert greedy(plain, "eager") == greedy(fused, "eager")


def test_the_setting_reaches_the_engine(tmp_path: Path, tiny_store: ModelStore) -> None:
    for value in (True, False):
        settings = tiny_settings(tmp_path / str(value), "awq", fuse_projections=value)
        engine = Engine(settings, tiny_store, MemoryState(), EngineStatus())
        assert engine.pipelines.spec.fuse_projections is value
    assert Settings(home=tmp_path).fuse_projections is True  # on by default


@pytest.mark.parametrize("attention", [decode_attention, packed_decode_attention])
@pytest.mark.parametrize("mask_kind", ["none", "bool", "additive"])
def test_decode_attention_is_sdpa_over_repeated_heads(
    mask_kind: str, attention: Callable[..., torch.Tensor]
) -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 6, 1, 16), torch.randn(2, 2, 9, 16), torch.randn(2, 2, 9, 16)
    mask = None
    if mask_kind != "none":  # a static cache of 12 slots, the last ones empty
        mask = torch.ones(2, 1, 1, 12, dtype=torch.bool)
        mask[0, ..., 5:] = False
        mask[1, ..., 7:] = False
        if mask_kind == "additive":
            mask = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
    reference = torch.nn.functional.scaled_dot_product_attention(
        q,
        k.repeat_interleave(3, dim=1),
        v.repeat_interleave(3, dim=1),
        attn_mask=None if mask is None else mask[..., :9],
        scale=0.25,
    ).transpose(1, 2)
    out = attention(q, k, v, mask, 0.25)
    assert out.shape == (2, 1, 6, 16)
    torch.testing.assert_close(out, reference)


def test_compiled_static_steps_give_the_same_tokens(
    pair: tuple[Loaded, Loaded], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A static step under ``torch.compile`` takes :func:`decode_attention` (no repeat_kv);
    dynamo's eager backend traces it as Inductor would, on the CPU."""
    fused = pair[1]
    reference = greedy(fused, "static")
    model = fused.language.model
    calls: list[int] = []
    torch._dynamo.reset()  # a graph traced for the other family's model would be reused
    monkeypatch.setattr(fused_module, "decode_attention", counting(calls))
    compiled = torch.compile(model.forward, backend="eager", dynamic=False)
    assert greedy(fused, "static", step=compiled) == reference
    assert calls  # the path ran (while tracing)


def test_eager_static_steps_pack_the_query_heads(
    pair: tuple[Loaded, Loaded], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An eager step with a mask (the static cache's; the batch's slots') takes
    :func:`packed_decode_attention`, not repeat_kv, and keeps the unfused model's tokens."""
    reference = greedy(pair[0], "static")
    calls: list[int] = []
    monkeypatch.setattr(
        fused_module, "packed_decode_attention", counting(calls, packed_decode_attention)
    )
    assert greedy(pair[1], "static") == reference
    assert calls


def counting(
    calls: list[int], attention: Callable[..., torch.Tensor] = decode_attention
) -> Callable[..., torch.Tensor]:
    def wrapped(*args: Any) -> torch.Tensor:
        calls.append(1)
        return attention(*args)

    return wrapped
