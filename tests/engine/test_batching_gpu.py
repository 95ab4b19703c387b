"""On the device: continuous batching on CUDA (bf16 compute, int4 decode kernel) gives each
of the demo model's held-out questions the tokens it gets alone, with the decode step
eager or replayed from the CUDA graphs recorded per batch-size bucket, of the eager forward
or of the Inductor-compiled one (the default on CUDA).

With dense copies of the int4 weights (``dense``), rows of a batch multiply by those
while a lone row takes the int4 kernel.

Run there: ``python -m pytest tests/engine/test_batching_gpu.py -m gpu -q``.

Exactness between two bf16 paths holds only where the reference is decided: rows of a
batch go through matmuls of another shape than a lone row (another kernel, another
rounding) and attend over a masked, longer cache, so a token whose top two logits lie
within :data:`NEAR_TIE` may go either way. The tests count exact mismatches, and allow
only such near-ties, at most one in 24 questions.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from qwen_ui.demo import scenes
from qwen_ui.engine.awq import Int4Linear
from qwen_ui.engine.batching import Batch, Sequence
from qwen_ui.engine.dense_weights import dense_weight
from qwen_ui.engine.generate import (
    CACHE_BUCKET,
    Generation,
    Outcome,
    SamplingOptions,
    batched_step,
    run,
)
from qwen_ui.engine.pipelines import Loaded, ModelSpec, Pipelines
from qwen_ui.engine.status import EngineStatus
from qwen_ui.settings import DEMO_MODEL_ID
from qwen_ui.store import ModelStore
from tests.engine.test_gpu_decode import NEAR_TIE, prompt_for, reference_margin

WEIGHTS = Path(scenes.__file__).resolve().parent / "weights" / "awq"
N_HELD_OUT = 24

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.skipif(not any(WEIGHTS.glob("*.safetensors")), reason="demo AWQ weights not built"),
]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Loaded:
    store = ModelStore(tmp_path_factory.mktemp("store"))
    store.install(WEIGHTS, DEMO_MODEL_ID, "awq")
    spec = ModelSpec(DEMO_MODEL_ID, "awq", "cuda", 3136, 112_896, 0, "batched", True)
    return Pipelines(store, spec, EngineStatus()).load()


@pytest.fixture(scope="module")
def samples() -> list[scenes.Sample]:
    return scenes.held_out(N_HELD_OUT, seed=7)


@pytest.fixture(scope="module")
def references(
    demo: Loaded, samples: list[scenes.Sample], together: dict[str, list[list[int]]]
) -> list[list[int]]:
    """Each sample's greedy tokens alone (the single-request eager loop)."""
    out = []
    for sample in samples:
        tokens: list[int] = []
        prompt = prompt_for(demo, sample)
        generation = Generation(demo.language.model, prompt, SamplingOptions(24))
        run(generation, demo.language.stop_ids, tokens.append, bool)
        out.append(tokens)
    return out


@pytest.fixture(scope="module")
def together(demo: Loaded, samples: list[scenes.Sample]) -> dict[str, list[list[int]]]:
    return {
        "eager": batched(demo, samples, False),
        "graphs": batched(demo, samples, True),
        "compiled": batched(demo, samples, True, compiled=True),
        "dense": with_dense_copies(demo, lambda: batched(demo, samples, True, compiled=True)),
        "triton": with_triton_copies(demo, lambda: batched(demo, samples, True, compiled=True)),
    }


def with_dense_copies(loaded: Loaded, work: Callable[[], list[list[int]]]) -> list[list[int]]:
    """``work()`` with every int4 layer multiplying inputs of two rows or more by a dense
    copy of its weight (forced here; the load times where each shape gains from it), so
    every batch bucket but the one-row one takes the copies."""
    layers = [m for m in loaded.language.model.modules() if isinstance(m, Int4Linear)]
    for layer in layers:
        weight = dense_weight(layer)
        assert weight is not None
        layer.keep_dense(weight, 2)
    try:
        return work()
    finally:
        for layer in layers:
            layer.drop_dense()


def with_triton_copies(loaded: Loaded, work: Callable[[], list[list[int]]]) -> list[list[int]]:
    """``work()`` with every int4 layer the Triton kernel takes multiplying inputs of 2 to
    16 rows by it (forced here; the load times where each shape gains from it)."""
    from qwen_ui.engine import triton_int4

    layers = [m for m in loaded.language.model.modules() if isinstance(m, Int4Linear)]
    for layer in layers:
        if triton_int4.fits(layer.out_features, layer.in_features, layer.group_size):
            copy = triton_int4.copy_of(layer)
            assert copy is not None
            words, plan = copy
            layer.keep_rows_kernel(words, plan.args(), 2, triton_int4.MAX_ROWS)
    assert any(layer.rows_from for layer in layers), "no layer takes the Triton kernel"
    try:
        return work()
    finally:
        for layer in layers:
            layer.drop_rows_kernel()


def batch_of(
    loaded: Loaded,
    samples: list[scenes.Sample],
    graphs: bool,
    caps: dict[int, int] | None = None,
    compiled: bool = False,
) -> tuple[Batch[Any], dict[int, Outcome]]:
    """A batch of at most 8 whose entrant ``i`` is sample ``i`` (``caps[i]`` new tokens,
    else 24), and where the sequences' outcomes go; ``compiled``: steps recorded from
    :func:`batched_step`."""
    stops = frozenset(loaded.language.stop_ids)
    out: dict[int, Outcome] = {}

    def sequence(i: int) -> Sequence:
        return Sequence(
            prompt_for(loaded, samples[i]),
            SamplingOptions((caps or {}).get(i, 24)),
            stops,
            lambda _t: None,
            lambda outcome: out.__setitem__(i, outcome),
            lambda error: pytest.fail(f"sequence {i} failed: {error!r}"),
            lambda: False,
        )

    model = loaded.language.model
    batch: Batch[Any] = Batch(
        8,
        lambda ids: [sequence(i) for i in ids],
        lambda: model,
        0,
        graphs,
        compile_step=batched_step if compiled else None,
    )
    return batch, out


def batched(
    loaded: Loaded, samples: list[scenes.Sample], graphs: bool, compiled: bool = False
) -> list[list[int]]:
    """Every sample's greedy tokens from one batch of at most 8, newcomers joining as
    others end; the graphs' buckets are checked to have been recorded (with ``compiled``:
    of the compiled forward at the first cache length, which never fell back to the eager
    one; a longer cache records the eager forward by design)."""
    batch, out = batch_of(loaded, samples, graphs, compiled=compiled)
    for i in range(len(samples)):
        batch.enter(i)
    # bucket: recorded from the compiled forward; seen while the batch runs, as it lets
    # its steps go once it runs dry
    seen: dict[int, bool] = {}
    while batch.busy:
        batch.step()
        if batch._graphs is not None:
            seen |= {b: batch._graphs._steps[b].compiled for b in batch._graphs.buckets}
    if graphs:
        recorded = batch._graphs
        assert recorded is not None and recorded.record and 8 in seen
        assert (recorded.compiled is not None and recorded.compiled_length is not None) == compiled
        assert compiled or not any(seen.values())
    return [out[i].tokens for i in range(len(samples))]


def test_graphs_are_recorded_again_when_the_cache_grows(
    demo: Loaded, samples: list[scenes.Sample]
) -> None:
    """A newcomer that needs a longer cache than the running ones makes the cache grow:
    every bucket is recorded again on the new tensors, into a new memory pool (sharing the
    dropped graphs' pool failed the allocator's ``use_count > 0`` assertion at the next
    capture), and the steps keep replaying graphs; the batch runs dry and starts again."""
    long = 3 * CACHE_BUCKET
    batch, out = batch_of(demo, samples, True, caps={8: long, 9: 8})
    for i in range(8):
        batch.enter(i)
    for _ in range(4):  # the demo's answers are short: some end within a few steps
        batch.step()
        if batch._graphs is not None and 8 in batch._graphs.buckets:
            break
    graphs = batch._graphs
    assert graphs is not None and graphs.record and 8 in graphs.buckets
    length = batch.cache.length
    batch.enter(8)  # joins as the first of the others ends, at a longer cache
    while batch.busy and batch.cache.length == length:
        batch.step()
    assert batch.cache.length > length  # (an idle batch drops its cache: checked here)
    while batch.busy:
        batch.step()
    assert batch._graphs is graphs and graphs.record
    assert len(out[8].tokens) == long or out[8].finish_reason == "stop"
    assert graphs._steps == {}  # let go with the cache
    batch.enter(9)  # an idle batch dropped its cache: allocated again, recorded again
    seen: set[int] = set()
    while batch.busy:
        batch.step()
        seen.update(graphs.buckets)
    assert graphs.record and seen == {1} and 9 in out


@pytest.mark.parametrize("step", ["eager", "graphs", "compiled", "dense", "triton"])
def test_a_batch_gives_each_question_its_tokens_alone(
    demo: Loaded,
    samples: list[scenes.Sample],
    references: list[list[int]],
    together: dict[str, list[list[int]]],
    step: str,
) -> None:
    mismatches = []
    for sample, reference, ours in zip(samples, references, together[step], strict=True):
        if ours != reference:
            margin = reference_margin(demo, sample, reference, ours)
            mismatches.append((sample.question, reference, ours, round(margin, 4)))
    print(f"batch ({step} step): {len(mismatches)} exact mismatches of {len(samples)}")
    assert len(mismatches) <= 1 and all(m[3] < NEAR_TIE for m in mismatches), mismatches


@pytest.mark.parametrize("step", ["graphs", "compiled"])
def test_graph_replay_gives_the_eager_steps_tokens(
    samples: list[scenes.Sample], together: dict[str, list[list[int]]], step: str
) -> None:
    pairs = zip(samples, together["eager"], together[step], strict=True)
    differ = [s.question for s, a, b in pairs if a != b]
    print(f"{step} steps replayed against eager steps: {len(differ)} of {len(samples)} differ")
    assert len(differ) <= 1, differ
