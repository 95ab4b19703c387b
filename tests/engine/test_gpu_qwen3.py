"""On the device: a Qwen3-VL prompt with images (DeepStack features) is recorded as a CUDA
graph prefill, and the replay gives the eager prefill's logits, and the compiled static
decode after it the same tokens as after the eager prefill (tiny random AutoAWQ checkpoint,
bf16, fused int4 projections, dequantized prefill). The CPU tests (``test_qwen3.py``)
cover the same paths without the capture.

Run there: ``python -m pytest tests/engine/test_gpu_qwen3.py -m gpu -q``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from qwen_ui.engine.generate import (
    CachePool,
    Generation,
    SamplingOptions,
    compiled_step,
    run,
)
from qwen_ui.engine.pipelines import ModelSpec, Pipelines, Turn
from qwen_ui.engine.prefill_graphs import PrefillGraphs
from qwen_ui.engine.status import EngineStatus
from qwen_ui.store import ModelStore
from tests.engine.support import build_family_model, write_awq_checkpoint

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
MODEL = "test/qwen3_vl"


def test_deepstack_prefill_is_recorded_and_replayed(tmp_path: Path) -> None:
    plain = build_family_model("qwen3_vl", tmp_path / "plain")
    store = ModelStore(tmp_path / "store")
    store.install(write_awq_checkpoint(plain, tmp_path / "awq"), MODEL, "awq")
    spec = ModelSpec(MODEL, "awq", "cuda", 3136, 128 * 128, 16, "batched", True)
    loaded = Pipelines(store, spec, EngineStatus()).load()
    model = loaded.language.model
    images = [Image.new("RGB", (100, 80), (255, 0, 0)), Image.new("RGB", (60, 120), (0, 0, 255))]
    prompt = loaded.language.build_prompt(
        [Turn("What shapes are in the pictures?", 2)], [loaded.vision.encode(i) for i in images]
    )
    assert prompt.deepstack
    graphs = PrefillGraphs(model, 1024)
    pool, step = CachePool(model), compiled_step(model)
    logits = []
    for g in (None, graphs):
        generation = Generation(model, prompt, SamplingOptions(1), "static", pool, step, g)
        with torch.inference_mode():
            logits.append(generation._prefill().float())
        generation.release()
    assert graphs.record and graphs.usable and graphs.buckets  # captured, not fallen back
    scale = float(logits[0].abs().max())
    assert float((logits[1] - logits[0]).abs().max()) <= 0.02 * scale
    answers = []
    for g in (None, graphs):
        tokens: list[int] = []
        run(
            Generation(model, prompt, SamplingOptions(16), "static", pool, step, g),
            [],
            tokens.append,
            bool,
        )
        answers.append(tokens)
    assert answers[0] == answers[1] and len(answers[0]) == 16
