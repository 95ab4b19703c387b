"""Continuous batching on the CPU: every sequence of a batch yields the tokens it yields
alone (the tiny model in float32 and AWQ), whoever it shares the batch with, whenever it
joins, whoever leaves or is cancelled, whatever its cap, stops and sampling seed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import torch
from PIL import Image
from torch._dynamo.utils import counters

from qwen_ui.engine import slots as slots_module
from qwen_ui.engine.batching import Arrivals, Batch, Sequence
from qwen_ui.engine.decode_graphs import DecodeGraphs
from qwen_ui.engine.generate import (
    CACHE_BUCKET,
    Generation,
    Outcome,
    Prompt,
    SamplingOptions,
    batched_step,
    run,
)
from qwen_ui.engine.pipelines import Loaded, Turn
from qwen_ui.engine.prefill_graphs import PrefillGraphs
from qwen_ui.engine.slots import SlotCache, slot_bucket, step_mask
from tests.engine.conftest import scene_images

QUESTIONS = [
    ("What shape is in the picture?", 1),
    ("How many squares are there?", 2),
    ("Describe the image.", 0),
    ("Which picture shows more shapes? The second picture or the third?", 3),
]


def prompt_of(loaded: Loaded, question: str, count: int) -> Prompt:
    images: list[Image.Image] = scene_images()[:count]
    embeddings = [loaded.vision.encode(image) for image in images]
    return loaded.language.build_prompt([Turn(question, count)], embeddings)


def alone(loaded: Loaded, prompt: Prompt, options: SamplingOptions, stops: list[int]) -> Outcome:
    generation = Generation(loaded.language.model, prompt, options)
    return run(generation, stops, lambda _t: None, lambda: False)


@dataclass(eq=False)
class Client:
    """One request of a test: its sequence and what reached it."""

    prompt: Prompt
    options: SamplingOptions
    stops: list[int]
    cancel_after: int | None = None
    streamed: list[int] = field(default_factory=list)
    outcome: Outcome | None = None
    error: BaseException | None = None
    sequence: Sequence | None = None

    def cancelled(self) -> bool:
        return self.cancel_after is not None and len(self.streamed) >= self.cancel_after

    def fail(self, error: BaseException) -> None:
        self.error = error

    def make(self) -> Sequence:
        self.sequence = Sequence(
            self.prompt,
            self.options,
            frozenset(self.stops),
            self.streamed.append,
            self._finish,
            self.fail,
            self.cancelled,
        )
        return self.sequence

    def _finish(self, outcome: Outcome) -> None:
        self.outcome = outcome


def batch_for(
    loaded: Loaded, limit: int = 8, prefill_tokens: int = 0, replayed: bool = False
) -> Batch[Client]:
    """A batch of the tiny model; ``replayed``: its steps take the CUDA path (the fixed
    buffers of :class:`DecodeGraphs`, run one ahead and fed on the device), not captured
    on the CPU."""
    model = loaded.language.model
    make = lambda clients: [c.make() for c in clients]  # noqa: E731
    batch = Batch(limit, make, lambda: model, prefill_tokens=prefill_tokens)
    if replayed:
        setattr(batch, "_graphed", lambda _model: True)  # noqa: B010
    return batch


@pytest.fixture(params=["eager", "replayed"])
def replayed(request: pytest.FixtureRequest) -> bool:
    """Both ways a batch steps: eager (the CPU's), replayed (CUDA's, run ahead)."""
    return bool(request.param == "replayed")


def drain(batch: Batch[Client], steps: int = 10_000) -> int:
    n = 0
    while batch.busy and n < steps:
        batch.step()
        n += 1
    return n


def greedy_clients(loaded: Loaded, caps: list[int] | None = None) -> list[Client]:
    stops = loaded.language.stop_ids
    caps = caps or [12, 16, 9, 14]
    return [
        Client(prompt_of(loaded, q, n), SamplingOptions(cap), stops)
        for (q, n), cap in zip(QUESTIONS, caps, strict=True)
    ]


def expect_alone(loaded: Loaded, client: Client) -> Outcome:
    return alone(loaded, client.prompt, client.options, client.stops)


def test_each_sequence_of_a_batch_gives_its_tokens_alone(loaded: Loaded, replayed: bool) -> None:
    clients = greedy_clients(loaded)
    batch = batch_for(loaded, replayed=replayed)
    for client in clients:
        batch.enter(client)
    drain(batch)
    for client in clients:
        expected = expect_alone(loaded, client)
        assert client.outcome == expected and client.streamed == expected.tokens
        assert client.error is None
    assert not batch.running and not batch.waiting


def test_sequences_join_mid_way_and_reuse_freed_slots(loaded: Loaded, replayed: bool) -> None:
    clients = greedy_clients(loaded, caps=[3, 20, 11, 7])
    batch = batch_for(loaded, limit=2, replayed=replayed)
    for client in clients:
        batch.enter(client)  # two run, two wait for a free slot
    batch.step()
    assert len(batch.running) == 2 and len(batch.waiting) == 2
    slots = set()
    while batch.busy:
        batch.step()
        slots.add(batch.cache.slots)
    assert slots == {2, 0}  # the two slots were reused, never more (0: freed when idle)
    for client in clients:
        assert client.outcome == expect_alone(loaded, client)


def test_a_newcomer_joins_a_running_batch_at_a_step_boundary(
    loaded: Loaded, replayed: bool
) -> None:
    first, *later = greedy_clients(loaded, caps=[24, 5, 30, 6])
    batch = batch_for(loaded, replayed=replayed)
    batch.enter(first)
    for _ in range(4):
        batch.step()
    # the prefill's token at once, then one per step, each reported during the next step
    # (replayed: read one step later, the next one queued first)
    assert len(first.streamed) == (3 if replayed else 4)
    for client in later:  # one longer than the cache holds: it grows, keeping the runners
        batch.enter(client)
        batch.step()
    drain(batch)
    for client in [first, *later]:
        assert client.outcome == expect_alone(loaded, client)


def test_a_cancelled_sequence_leaves_the_others_unchanged(loaded: Loaded, replayed: bool) -> None:
    clients = greedy_clients(loaded, caps=[20, 20, 20, 20])
    clients[1].cancel_after = 3
    clients[1].stops = []  # it runs until cancelled
    batch = batch_for(loaded, replayed=replayed)
    for client in clients:
        batch.enter(client)
    drain(batch)
    cancelled = clients[1].outcome
    assert cancelled is not None and cancelled.finish_reason == "cancelled"
    # seen at the next decision: the step in flight at the cancel still ends in it
    assert len(cancelled.tokens) in (3, 4) and clients[1].streamed == cancelled.tokens
    for client in (clients[0], clients[2], clients[3]):
        assert client.outcome == expect_alone(loaded, client)


def test_caps_and_stop_tokens_are_each_sequences_own(loaded: Loaded, replayed: bool) -> None:
    clients = greedy_clients(loaded, caps=[2, 16, 5, 16])
    free = alone(loaded, clients[1].prompt, SamplingOptions(16), [])
    clients[1].stops = [free.tokens[4]]  # its own stop token, unknown to the others
    batch = batch_for(loaded, replayed=replayed)
    for client in clients:
        batch.enter(client)
    drain(batch)
    stopped = clients[1].outcome
    assert stopped is not None and stopped.finish_reason == "stop"
    assert stopped.tokens == free.tokens[: free.tokens.index(free.tokens[4])]
    assert clients[0].outcome is not None and len(clients[0].outcome.tokens) <= 2
    for client in clients:
        assert client.outcome == expect_alone(loaded, client)


def test_sampling_with_a_seed_is_reproducible_per_sequence(loaded: Loaded, replayed: bool) -> None:
    stops = loaded.language.stop_ids
    sampled = SamplingOptions(16, temperature=1.5, top_p=0.9, seed=7)

    def seeded() -> Client:
        return Client(prompt_of(loaded, "Describe the image.", 1), sampled, stops)

    runs = []
    for companions in ([], greedy_clients(loaded)[:2], greedy_clients(loaded)[1:]):
        client = seeded()
        batch = batch_for(loaded, replayed=replayed)
        for other in [*companions[:1], client, *companions[1:]]:
            batch.enter(other)
        drain(batch)
        assert client.outcome is not None
        runs.append(client.outcome.tokens)
    assert runs[0] == runs[1] == runs[2] and len(runs[0]) > 0
    assert runs[0] == expect_alone(loaded, seeded()).tokens


def test_a_failing_callback_ends_only_its_sequence(loaded: Loaded, replayed: bool) -> None:
    clients = greedy_clients(loaded, caps=[10, 10, 10, 10])
    clients[2].stops = []

    def boom(_token: int) -> None:
        raise RuntimeError("the client's stream broke")

    batch = batch_for(loaded, replayed=replayed)
    for client in clients:
        batch.enter(client)
    batch.step()  # prefill: the sequences exist now
    assert clients[2].sequence is not None
    clients[2].sequence.on_token = boom
    drain(batch)
    assert isinstance(clients[2].error, RuntimeError) and clients[2].outcome is None
    for client in (clients[0], clients[1], clients[3]):
        assert client.outcome == expect_alone(loaded, client)


def test_a_failing_step_fails_its_sequences_and_the_batch_serves_on(
    loaded: Loaded, monkeypatch: pytest.MonkeyPatch
) -> None:
    clients = greedy_clients(loaded)
    batch = batch_for(loaded)
    batch.enter(clients[0])
    batch.step()

    def broken(_chain: object = None) -> None:
        raise RuntimeError("out of memory")

    with monkeypatch.context() as patch:
        patch.setattr(batch, "_launch", broken)
        batch.step()
    assert isinstance(clients[0].error, RuntimeError) and not batch.running
    batch.enter(clients[1])
    drain(batch)
    assert clients[1].outcome == expect_alone(loaded, clients[1])


def test_prepare_failing_fails_the_newcomers_only(loaded: Loaded) -> None:
    clients = greedy_clients(loaded)
    calls: list[int] = []

    def prepare(entrants: list[Client]) -> list[Sequence]:
        calls.append(len(entrants))
        if len(calls) == 2:
            raise RuntimeError("the vision tower failed")
        return [c.make() for c in entrants]

    model = loaded.language.model
    batch: Batch[Client] = Batch(8, prepare, lambda: model)
    batch.enter(clients[0])
    batch.step()
    batch.enter(clients[1])
    batch.enter(clients[2])
    drain(batch)
    assert calls == [1, 2]
    assert clients[0].outcome == expect_alone(loaded, clients[0])
    assert all(isinstance(c.error, RuntimeError) for c in clients[1:3])


def counting_prepare(calls: list[int]) -> Callable[[list[Client]], list[Sequence]]:
    """A batch's ``prepare`` that notes how many newcomers each join takes."""

    def prepare(entrants: list[Client]) -> list[Sequence]:
        calls.append(len(entrants))
        return [c.make() for c in entrants]

    return prepare


def test_newcomers_wait_for_questions_on_their_way(loaded: Loaded) -> None:
    clients = greedy_clients(loaded)
    calls: list[int] = []
    prepare = counting_prepare(calls)
    model = loaded.language.model
    arrivals = Arrivals()
    batch: Batch[Client] = Batch(8, prepare, lambda: model, arrivals=arrivals, join_wait_s=60)
    with arrivals.expected() as first_landed, arrivals.expected() as second_landed:
        first_landed()
        batch.enter(clients[0])
        batch.step()
        assert calls == [] and batch.busy  # held: another question is on its way
        second_landed()
        batch.enter(clients[1])
        batch.step()  # none on its way: both join at once
    assert calls == [2]
    drain(batch)
    assert [c.outcome for c in clients[:2]] == [expect_alone(loaded, c) for c in clients[:2]]


def test_newcomers_are_held_no_longer_than_the_wait_nor_past_the_free_slots(
    loaded: Loaded,
) -> None:
    clients = greedy_clients(loaded)
    calls: list[int] = []
    prepare = counting_prepare(calls)
    model = loaded.language.model
    arrivals = Arrivals()
    with arrivals.expected():  # a question that never arrives
        waited: Batch[Client] = Batch(8, prepare, lambda: model, arrivals=arrivals, join_wait_s=0)
        waited.enter(clients[0])
        waited.step()  # no wait left
        assert calls == [1]
        full: Batch[Client] = Batch(2, prepare, lambda: model, arrivals=arrivals, join_wait_s=60)
        full.enter(clients[1])
        full.enter(clients[2])
        full.step()  # no slot for the one on its way
        assert calls == [1, 2]


def test_arrivals_count_each_question_once() -> None:
    arrivals = Arrivals()
    with arrivals.expected() as landed:
        with arrivals.expected():
            assert arrivals.coming == 2
        assert arrivals.coming == 1
        landed()
        landed()  # once only
        assert arrivals.coming == 0
    assert arrivals.coming == 0
    with pytest.raises(RuntimeError), arrivals.expected():
        raise RuntimeError("failed on its way")
    assert arrivals.coming == 0


# --- the slot cache ---------------------------------------------------------------------
def test_slot_buckets() -> None:
    assert [slot_bucket(n, 8) for n in (1, 2, 3, 5, 8)] == [1, 2, 4, 8, 8]
    assert slot_bucket(3, 3) == 3  # never past the limit
    assert slot_bucket(40, 64) == 64


def test_step_mask_keeps_each_rows_valid_positions() -> None:
    mask = step_mask(torch.tensor([0, 2, 4]), 6)
    assert mask.shape == (3, 1, 1, 6)
    assert mask[:, 0, 0].int().tolist() == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 1, 0],
    ]


def test_the_slot_cache_grows_keeping_what_it_holds_and_moves_slots() -> None:
    cache = SlotCache(limit=8)
    like = [(torch.zeros(1, 2, 4, 3), torch.zeros(1, 2, 4, 3))]
    cache.ensure(1, 10, like)
    assert (cache.slots, cache.length) == (1, 256)
    prefill: list[tuple[torch.Tensor, torch.Tensor]] = [
        (torch.randn(1, 2, 10, 3), torch.randn(1, 2, 10, 3))
    ]
    cache.write(0, prefill, 0, 10)
    cache.ensure(3, 300, like)
    assert (cache.slots, cache.length) == (4, 512)
    assert torch.equal(cache.keys[0][0, :, :10], prefill[0][0][0])
    cache.move(0, 2, 10)
    assert torch.equal(cache.values[0][2, :, :10], prefill[0][1][0])
    assert cache.nbytes == 2 * 4 * 2 * 512 * 3 * 4
    cache.clear()
    assert cache.slots == 0 and cache.nbytes == 0


def test_a_slot_cache_grows_a_layer_at_a_time_and_is_cleared_if_that_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    like = [(torch.randn(1, 2, 10, 4), torch.randn(1, 2, 10, 4)) for _ in range(3)]
    cache = SlotCache(4)
    cache.ensure(1, 10, like)
    cache.write(0, like, 0, 10)
    made: list[int] = []
    real = slots_module._zeros

    def zeros(like: torch.Tensor, slots: int, length: int) -> torch.Tensor:
        made.append(len(made))
        if len(made) == 4:  # the second layer's values
            raise RuntimeError("CUDA out of memory")
        return real(like, slots, length)

    monkeypatch.setattr(slots_module, "_zeros", zeros)
    version = cache.version
    with pytest.raises(RuntimeError, match="out of memory"):
        cache.ensure(1, 600, like)
    assert len(made) == 4  # the first layer had grown when the second failed
    assert cache.slots == 0 and cache.version > version  # cleared: no mixed lengths kept


def test_the_graphs_fixed_buffer_step_gives_the_same_tokens(
    loaded: Loaded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step :class:`DecodeGraphs` records (fixed buffers, padding rows up to the
    bucket, attention over the cache's whole length), run without recording on the CPU:
    three sequences pad to a bucket of four; as they leave, two, then one."""
    clients = greedy_clients(loaded, caps=[6, 14, 10, 3])[:3]
    batch = batch_for(loaded)
    monkeypatch.setattr(batch, "_graphed", lambda _model: True)
    for client in clients:
        batch.enter(client)
    buckets: set[int] = set()
    while batch.busy:
        batch.step()
        assert batch._graphs is not None
        buckets.update(batch._graphs.buckets)
    assert buckets == {1, 2, 4} and batch._graphs._steps == {}  # let go once dry
    assert not batch._graphs.record  # the CPU: the same pass, not captured
    for client in clients:
        assert client.outcome == expect_alone(loaded, client)


def test_replayed_steps_run_one_ahead_fed_on_the_device(
    loaded: Loaded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the running sequences stay the same, each replayed step is fed the step
    before it on the device (its tokens not read yet); when one leaves, the next step is
    fed from the host again, after the step in flight is read."""
    clients = greedy_clients(loaded, caps=[20, 7, 20, 20])[:2]
    for client in clients:
        client.stops = []  # they run to their caps: 20 and 7 tokens
    batch = batch_for(loaded, replayed=True)
    chained: list[bool] = []
    real = DecodeGraphs.chained

    def chain(graphs: DecodeGraphs, tokens: torch.Tensor) -> torch.Tensor | None:
        logits = real(graphs, tokens)
        chained.append(logits is not None)
        return logits

    monkeypatch.setattr(DecodeGraphs, "chained", chain)
    for client in clients:
        batch.enter(client)
    batch.step()
    assert batch._pending is not None  # the first step's tokens are read at the next one
    drain(batch)
    for client in clients:
        assert client.outcome == expect_alone(loaded, client)
    # 19 steps: the first and the one after the second client left are fed from the host
    assert chained.count(True) >= 15 and batch._pending is None


def test_the_compiled_step_gives_the_same_tokens_at_its_one_cache_length(
    loaded: Loaded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recorded step through Inductor (:func:`batched_step`, the CUDA default), run
    without recording on the CPU: every bucket at the first cache length records the
    compiled forward and each sequence still gives its tokens alone; a longer cache records
    the eager forward (no compile in the middle of running answers); once the batch ran
    dry, a short newcomer's cache is allocated at the compiled length again."""
    model = loaded.language.model
    make = lambda clients: [c.make() for c in clients]  # noqa: E731
    batch = Batch(8, make, lambda: model, compile_step=batched_step)
    monkeypatch.setattr(batch, "_graphed", lambda _model: True)

    def answer(clients: list[Client]) -> dict[int, bool]:
        """The answers, checked; whether each bucket's step recorded the compiled forward
        (seen while they run: the batch lets its steps go once it runs dry)."""
        for client in clients:
            batch.enter(client)
        recorded: dict[int, bool] = {}
        while batch.busy:
            batch.step()
            graphs = batch._graphs
            assert graphs is not None
            recorded |= {b: graphs._steps[b].compiled for b in graphs.buckets}
        for client in clients:
            assert client.outcome == expect_alone(loaded, client)
        return recorded

    first = counters["stats"]["unique_graphs"]
    assert answer(greedy_clients(loaded, caps=[6, 14, 10, 3])[:3]) == {1: True, 2: True, 4: True}
    assert counters["stats"]["unique_graphs"] > first  # compiled (the counter counts it)
    graphs = batch._graphs
    assert graphs is not None and graphs.compiled is not None
    assert graphs.compiled_length == CACHE_BUCKET
    stops = loaded.language.stop_ids
    long = Client(prompt_of(loaded, "Describe the image.", 1), SamplingOptions(300), [])
    assert answer([long]) == {1: False} and batch.cache.slots == 0  # ran dry: dropped
    assert graphs._steps == {} and graphs._pool is None  # the recorded steps with it
    short = Client(prompt_of(loaded, "Describe the image.", 0), SamplingOptions(3), stops)
    compiles = counters["stats"]["unique_graphs"]
    batch.enter(short)
    batch.step()
    assert batch.cache.length == CACHE_BUCKET
    assert answer([]) == {1: True} and batch._graphs is graphs
    assert counters["stats"]["unique_graphs"] == compiles  # recorded again, not compiled
    assert short.outcome == expect_alone(loaded, short)


def test_a_chunked_prefill_lets_the_running_sequences_decode_meanwhile(loaded: Loaded) -> None:
    first, *later = greedy_clients(loaded, caps=[40, 8, 12, 6])
    batch = batch_for(loaded, prefill_tokens=60)  # 20 positions per newcomer per step
    batch.enter(first)
    batch.step()  # alone in an idle batch: nothing to interleave, one pass
    assert first.streamed and first.prompt.length > 60
    for client in later:
        batch.enter(client)
    chunks = -(-max(c.prompt.length for c in later) // 20)
    streamed = []
    for _ in range(chunks - 1):
        batch.step()
        streamed.append(len(first.streamed))
        assert batch._prefilling is not None and not batch._prefilling.complete
    assert chunks > 2 and not any(c.streamed for c in later)
    assert streamed == list(range(streamed[0], streamed[0] + chunks - 1))  # a token a step
    batch.step()  # the last chunk: they join, their first tokens reported at once
    assert batch._prefilling is None and all(c.sequence in batch.running for c in later)
    drain(batch)
    for client in [first, *later]:
        assert client.outcome == expect_alone(loaded, client)


class Recorded:
    """The model's recorded prefills for the batch (the CPU's path: the padded pass
    without a capture), counting the prompts they replayed."""

    def __init__(self, loaded: Loaded, rows: int) -> None:
        self.graphs = PrefillGraphs(loaded.language.model, rows, record=False)
        self.replayed: list[int] = []
        replay = self.graphs.replay

        def counted(prompt: Prompt, positions: torch.Tensor) -> torch.Tensor:
            self.replayed.append(prompt.length)
            return replay(prompt, positions)

        self.graphs.replay = counted  # type: ignore[method-assign]

    def __call__(self, model: torch.nn.Module) -> PrefillGraphs:
        assert model is self.graphs.model
        return self.graphs


def test_a_lone_newcomer_replays_a_recorded_prefill(loaded: Loaded) -> None:
    """Newcomers that join alone, to an idle batch or a running one, take the recorded
    prefill and give their tokens alone; newcomers joining together take the padded pass,
    and so does a prompt longer than the graphs' rows."""
    first, second, *together = greedy_clients(loaded, caps=[20, 14, 9, 6])
    recorded = Recorded(loaded, 1024)
    model = loaded.language.model
    make = lambda clients: [c.make() for c in clients]  # noqa: E731
    batch: Batch[Client] = Batch(8, make, lambda: model, lone_prefill=recorded)
    batch.enter(first)
    batch.step()
    assert recorded.replayed == [first.prompt.length] and len(first.streamed) == 1
    batch.step()
    batch.enter(second)  # alone, into the running batch
    batch.step()
    assert recorded.replayed == [first.prompt.length, second.prompt.length]
    for client in together:
        batch.enter(client)
    drain(batch)
    assert len(recorded.replayed) == 2
    for client in [first, second, *together]:
        assert client.outcome == expect_alone(loaded, client), client.prompt.length
    short = Recorded(loaded, 64)  # shorter than any prompt with an image
    batch = Batch(8, make, lambda: model, lone_prefill=short)
    long = greedy_clients(loaded)[0]
    batch.enter(long)
    drain(batch)
    assert short.replayed == [] and long.outcome == expect_alone(loaded, long)


def test_a_lone_newcomer_past_the_chunk_is_chunked_beside_running_answers(
    loaded: Loaded,
) -> None:
    """Past ``prefill_tokens``, a lone newcomer replays its recorded prefill into an idle
    batch (no one waits) but is prefilled in chunks beside a running answer."""
    running, late = greedy_clients(loaded, caps=[30, 8, 8, 8])[:2]
    recorded = Recorded(loaded, 1024)
    model = loaded.language.model
    make = lambda clients: [c.make() for c in clients]  # noqa: E731
    batch: Batch[Client] = Batch(8, make, lambda: model, prefill_tokens=20, lone_prefill=recorded)
    batch.enter(running)
    batch.step()
    assert batch._prefilling is None and len(recorded.replayed) == 1  # idle: replayed
    batch.enter(late)
    batch.step()
    assert batch._prefilling is not None and len(recorded.replayed) == 1  # chunked
    drain(batch)
    for client in [running, late]:
        assert client.outcome == expect_alone(loaded, client)
