"""Long prompts through dequantized weights (``prefill_dequant_rows``) match the int4
kernel path: prefill logits (cosine >= 0.999, same argmax) on the tiny model, greedy tokens
on the demo model's held-out questions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image

from qwen_ui.demo import scenes
from qwen_ui.engine.awq import Int4Linear
from qwen_ui.engine.generate import Generation, SamplingOptions, run
from qwen_ui.engine.pipelines import Loaded, ModelSpec, Pipelines, Turn
from qwen_ui.engine.status import EngineStatus
from qwen_ui.settings import DEMO_MODEL_ID
from qwen_ui.store import ModelStore
from tests.engine.conftest import TINY_ID
from tests.engine.support import prefill_logits

ROWS = 16  # the tiny prompts are longer than this; a decode step (1 row) is not


def load(store: ModelStore, rows: int) -> Loaded:
    spec = ModelSpec(TINY_ID, "awq", "cpu", 3136, 112 * 112, prefill_dequant_rows=rows)
    return Pipelines(store, spec, EngineStatus()).load()


@pytest.fixture(scope="module")
def pair(tiny_store: ModelStore) -> tuple[Loaded, Loaded]:
    return load(tiny_store, 0), load(tiny_store, ROWS)


SCENES = [
    Image.new("RGB", (100, 80), (255, 0, 0)),
    Image.new("RGB", (60, 120), (0, 0, 255)),
    Image.new("RGB", (90, 90), (0, 160, 0)),
]


def test_layers_keep_the_awq_tensors_only_when_asked(pair: tuple[Loaded, Loaded]) -> None:
    plain, dequant = (
        [m for m in p.language.model.modules() if isinstance(m, Int4Linear)] for p in pair
    )
    assert plain and all(m.prefill_rows == 0 and not hasattr(m, "awq_qweight") for m in plain)
    assert all(m.prefill_rows == ROWS and not m.dequantized for m in dequant)


def test_dequantized_weight_is_what_the_kernel_multiplies(pair: tuple[Loaded, Loaded]) -> None:
    layer = next(m for m in pair[1].language.model.modules() if isinstance(m, Int4Linear))
    x = torch.randn(4, layer.in_features)
    kernel = torch._weight_int4pack_mm_for_cpu(
        x.to(torch.bfloat16), layer.packed, layer.group_size, layer.scales_and_zeros
    ).float()
    dense = x @ layer.dequantized_weight(torch.float32).t()
    assert torch.nn.functional.cosine_similarity(kernel.flatten(), dense.flatten(), 0) > 0.9999


@pytest.mark.parametrize("count", [1, 3])
def test_prefill_logits_match_the_int4_path(
    pair: tuple[Loaded, Loaded], count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    original = Int4Linear.dequantized_weight

    def spy(self: Int4Linear, dtype: torch.dtype) -> Any:
        calls.append(1)
        return original(self, dtype)

    reference = prefill_logits(pair[0], SCENES[:count])
    monkeypatch.setattr(Int4Linear, "dequantized_weight", spy)
    dequant = prefill_logits(pair[1], SCENES[:count])
    assert calls  # the long prompt really took the dequantized path
    cosine = torch.nn.functional.cosine_similarity(reference, dequant, dim=-1)
    assert float(cosine.min()) >= 0.999
    assert torch.equal(reference.argmax(-1), dequant.argmax(-1))


DEMO_WEIGHTS = Path(scenes.__file__).resolve().parent / "weights" / "awq"


@pytest.mark.slow  # about 60 s on 2 cores
@pytest.mark.skipif(
    not any(DEMO_WEIGHTS.glob("*.safetensors")), reason="demo AWQ weights not built"
)
def test_greedy_tokens_match_the_int4_path_on_the_demo_model(tmp_path: Path) -> None:
    """On the trained demo model (the tiny random one has near-tied logits, where the CPU
    kernel's and a dense matmul's rounding pick different tokens after the first)."""
    store = ModelStore(tmp_path)
    store.install(DEMO_WEIGHTS, DEMO_MODEL_ID, "awq")
    pair = [
        Pipelines(
            store, ModelSpec(DEMO_MODEL_ID, "awq", "cpu", 3136, 112_896, rows), EngineStatus()
        ).load()
        for rows in (0, ROWS)
    ]
    for sample in scenes.held_out(8, seed=7):
        answers = []
        for loaded in pair:
            embeddings = [loaded.vision.encode(i) for i in sample.images()]
            prompt = loaded.language.build_prompt(
                [Turn(sample.question, len(embeddings))], embeddings
            )
            assert prompt.length > ROWS
            tokens: list[int] = []
            generation = Generation(loaded.language.model, prompt, SamplingOptions(24))
            run(generation, loaded.language.stop_ids, tokens.append, bool)
            answers.append(tokens)
        assert answers[0] == answers[1], sample.question
