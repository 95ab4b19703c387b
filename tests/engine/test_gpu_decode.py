"""On the device: the fast paths (static cache + compiled/graph-captured decode step, int4
kernel for decode, dequantized prefill for long prompts) give the reference path's greedy
tokens on the demo model's held-out evaluation questions (``qwen_ui.demo.scenes``).

Run there: ``python -m pytest tests/engine/test_gpu_decode.py -m gpu -q``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from qwen_ui.demo import scenes
from qwen_ui.engine.generate import CachePool, Generation, SamplingOptions, compiled_step, run
from qwen_ui.engine.pipelines import Loaded, ModelSpec, Pipelines, Turn
from qwen_ui.engine.prefill_graphs import PrefillGraphs
from qwen_ui.engine.status import EngineStatus
from qwen_ui.settings import DEMO_MODEL_ID
from qwen_ui.store import ModelStore

WEIGHTS = Path(scenes.__file__).resolve().parent / "weights" / "awq"
N_HELD_OUT = 24

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.skipif(not any(WEIGHTS.glob("*.safetensors")), reason="demo AWQ weights not built"),
]


def load(store: ModelStore, prefill_rows: int, fuse: bool) -> Loaded:
    spec = ModelSpec(DEMO_MODEL_ID, "awq", "cuda", 3136, 112_896, prefill_rows, "batched", fuse)
    return Pipelines(store, spec, EngineStatus()).load()


@pytest.mark.parametrize(
    ("prefill_rows", "graphs"),
    [(0, False), (16, False), (16, True)],
    ids=["int4-prefill", "dequant-prefill", "graph-prefill"],
)
def test_fast_paths_give_the_reference_tokens(
    tmp_path: Path, prefill_rows: int, graphs: bool
) -> None:
    """The same greedy tokens, except where the reference itself is undecided: a token
    whose top two logits are within :data:`NEAR_TIE` may go either way between two bf16
    paths (int4 kernel against bf16 matmuls, eager against fused ops), at most once.
    ``graph-prefill`` replays the prefill from CUDA graphs recorded per length bucket."""
    store = ModelStore(tmp_path)
    store.install(WEIGHTS, DEMO_MODEL_ID, "awq")
    reference, fast = load(store, 0, False), load(store, prefill_rows, True)  # fused projections
    pool, step = CachePool(fast.language.model), compiled_step(fast.language.model)
    recorded = PrefillGraphs(fast.language.model, 2048) if graphs else None
    mismatches = []
    for sample in scenes.held_out(N_HELD_OUT, seed=7):
        answers = []
        for loaded, mode in ((reference, "eager"), (fast, "static")):
            prompt = prompt_for(loaded, sample)
            tokens: list[int] = []
            generation = (
                Generation(loaded.language.model, prompt, SamplingOptions(24))
                if mode == "eager"
                else Generation(
                    loaded.language.model,
                    prompt,
                    SamplingOptions(24),
                    "static",
                    pool,
                    step,
                    recorded,
                )
            )
            run(generation, loaded.language.stop_ids, tokens.append, bool)
            answers.append(tokens)
        if answers[0] != answers[1]:
            margin = reference_margin(reference, sample, answers[0], answers[1])
            mismatches.append((sample.question, answers, round(margin, 4)))
    assert len(mismatches) <= 1 and all(m[2] < NEAR_TIE for m in mismatches), mismatches
    if recorded is not None:
        assert recorded.record and recorded.buckets  # the prompts went through the graphs


NEAR_TIE = 0.25  # logits: two bf16 steps at magnitudes 16-32


def prompt_for(loaded: Loaded, sample: scenes.Sample) -> Any:
    embeddings = [loaded.vision.encode(i) for i in sample.images()]
    return loaded.language.build_prompt([Turn(sample.question, len(embeddings))], embeddings)


def reference_margin(
    loaded: Loaded, sample: scenes.Sample, ours: list[int], theirs: list[int]
) -> float:
    """The reference's top-1 minus top-2 logit where the two answers first differ."""
    pairs = zip([*ours, -1], [*theirs, -2], strict=False)  # -1/-2: an answer's end
    at = next(i for i, (a, b) in enumerate(pairs) if a != b)
    generation = Generation(loaded.language.model, prompt_for(loaded, sample), SamplingOptions(24))
    seen: list[torch.Tensor] = []
    generation.choose = lambda logits: seen.append(logits.float().flatten()) or 0  # type: ignore[method-assign]
    generation.prefill()
    for token in ours[:at]:
        generation.step(token)
    generation.release()
    top = torch.topk(seen[at], 2).values
    return float(top[0] - top[1])
