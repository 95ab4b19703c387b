"""The padded, staged prefill of :mod:`qwen_ui.engine.prefill_graphs` (on the CPU without
the graph capture itself, which ``tests/engine/test_gpu_decode.py`` checks on the device)
gives the eager prefill's logits, cache and tokens."""

from __future__ import annotations

import pytest
import torch

from qwen_ui.engine.generate import (
    CachePool,
    Generation,
    Prompt,
    SamplingOptions,
    prompt_positions,
    run,
)
from qwen_ui.engine.pipelines import Loaded, Turn
from qwen_ui.engine.prefill_graphs import BUCKET, PrefillGraphs, bucket_rows
from tests.engine.conftest import scene_images


def prompt(loaded: Loaded, count: int, question: str = "What shapes are there?") -> Prompt:
    embeddings = [loaded.vision.encode(i) for i in scene_images()[:count]]
    return loaded.language.build_prompt([Turn(question, count)], embeddings)


def generation(loaded: Loaded, p: Prompt, graphs: PrefillGraphs | None, n: int = 16) -> Generation:
    pool = CachePool(loaded.language.model)
    return Generation(loaded.language.model, p, SamplingOptions(n), "static", pool, None, graphs)


def test_rows_are_padded_to_the_bucket() -> None:
    assert [bucket_rows(n) for n in (1, BUCKET, BUCKET + 1, 3 * BUCKET - 1)] == [
        BUCKET,
        BUCKET,
        2 * BUCKET,
        3 * BUCKET,
    ]


@pytest.mark.parametrize("count", [0, 1, 3])
def test_the_padded_prefill_gives_the_eager_logits_and_cache(loaded: Loaded, count: int) -> None:
    p = prompt(loaded, count)
    graphs = PrefillGraphs(loaded.language.model, 1024, record=False)
    assert graphs.fits(p) and bucket_rows(p.length) > p.length  # padding rows present
    eager, padded = generation(loaded, p, None), generation(loaded, p, graphs)
    with torch.inference_mode():
        reference, ours = eager._prefill(), padded._prefill()
    torch.testing.assert_close(ours, reference, atol=1e-4, rtol=1e-4)
    for a, b in zip(eager.cache.layers, padded.cache.layers, strict=True):
        assert int(b.cumulative_length) == int(a.cumulative_length) == p.length
        torch.testing.assert_close(b.keys, a.keys, atol=1e-4, rtol=1e-4)  # zeros past the prompt
        torch.testing.assert_close(b.values, a.values, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("count", [0, 2])
def test_decoding_after_it_gives_the_reference_tokens(loaded: Loaded, count: int) -> None:
    p = prompt(loaded, count)
    graphs = PrefillGraphs(loaded.language.model, 1024, record=False)
    answers = []
    for g in (None, graphs):
        tokens: list[int] = []
        run(generation(loaded, p, g, 24), [], tokens.append, lambda: False)
        answers.append(tokens)
    assert len(answers[0]) == 24 and answers[1] == answers[0]
    assert graphs.buckets == [bucket_rows(p.length)]


def test_a_bucket_is_recorded_once_and_reused(loaded: Loaded) -> None:
    graphs = PrefillGraphs(loaded.language.model, 1024, record=False)
    first, second = (
        prompt(loaded, 1, "What shape is it?"),
        prompt(loaded, 1, "What colour is the shape?"),
    )
    assert first.length != second.length and bucket_rows(first.length) == bucket_rows(second.length)
    recorded: list[int] = []
    real = graphs._recorded
    graphs._recorded = lambda rows: recorded.append(rows) or real(rows)  # type: ignore[method-assign,func-returns-value]
    for p in (first, second, first):
        tokens: list[int] = []
        reference: list[int] = []
        run(generation(loaded, p, graphs, 8), [], tokens.append, lambda: False)
        run(generation(loaded, p, None, 8), [], reference.append, lambda: False)
        assert tokens == reference  # the longer prompt's rows do not leak into the shorter
    assert recorded == [bucket_rows(first.length)]


def test_prompts_it_cannot_take_go_the_eager_way(loaded: Loaded) -> None:
    p = prompt(loaded, 1)
    small = PrefillGraphs(loaded.language.model, BUCKET, record=False)
    assert not small.fits(p)  # longer than its rows
    tokens: list[int] = []
    reference: list[int] = []
    run(generation(loaded, p, small, 8), [], tokens.append, lambda: False)
    run(generation(loaded, p, None, 8), [], reference.append, lambda: False)
    assert tokens == reference and small.buckets == []
    deepstack = Prompt(p.input_ids, p.mm_token_type_ids, p.image_grid_thw, [], [torch.zeros(1)])
    assert not PrefillGraphs(loaded.language.model, 1024, record=False).fits(deepstack)


def test_models_with_sliding_window_layers_are_not_taken(loaded: Loaded) -> None:
    model = loaded.language.model
    config = model.model.language_model.config
    saved = getattr(config, "layer_types", None)
    try:
        config.layer_types = ["full_attention", "sliding_attention"] * (
            config.num_hidden_layers // 2
        )
        assert not PrefillGraphs(model, 1024, record=False).fits(prompt(loaded, 0))
    finally:
        config.layer_types = saved


def test_positions_reach_the_padded_pass(loaded: Loaded) -> None:
    """The image tokens' mrope positions are not 0..L-1, and the padded pass uses the ones
    it is given (so the agreement above is not that of a pass that ignores them)."""
    p = prompt(loaded, 1)
    model = loaded.language.model
    positions, _ = prompt_positions(model, p)
    flat = torch.arange(p.length).view(1, 1, -1).expand(3, 1, -1)
    assert not torch.equal(positions, flat)
    graphs = PrefillGraphs(model, 1024, record=False)
    pool = CachePool(model)
    with torch.inference_mode():
        right = graphs.prefill(p, positions, pool.take(256)).clone()
        wrong = graphs.prefill(p, flat, pool.take(512))
    assert not torch.allclose(right, wrong, atol=1e-3)


def test_a_failed_recording_falls_back_to_the_eager_pass(
    loaded: Loaded, caplog: pytest.LogCaptureFixture
) -> None:
    """Recording asked for where it cannot happen (no CUDA here): the answer is still the
    reference's, and later prompts take the model's own prefill."""
    p = prompt(loaded, 1)
    graphs = PrefillGraphs(loaded.language.model, 1024, record=True)
    for _ in range(2):
        tokens: list[int] = []
        reference: list[int] = []
        run(generation(loaded, p, graphs, 8), [], tokens.append, lambda: False)
        run(generation(loaded, p, None, 8), [], reference.append, lambda: False)
        assert tokens == reference
        assert not graphs.fits(p) and graphs.buckets == [bucket_rows(p.length)]
    assert caplog.text.count("recording the prefill graph failed") == 1
