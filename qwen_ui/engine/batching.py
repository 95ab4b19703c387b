"""Continuous batching on the worker thread: the requests being answered decode together.

:class:`Batch` is the worker's scheduler (:class:`~qwen_ui.engine.worker.Worker` calls
:meth:`Batch.step` between jobs). Newcomers wait in :meth:`Batch.enter` until a step
boundary; there, as many as there are free slots are prepared together (the engine's
``prepare``: their images encoded in one call, their prompts built), prefilled together
(:mod:`qwen_ui.engine.batch_prefill`: one padded pass, or a chunk of it per boundary)
and copied into the batch's slots of the :class:`~qwen_ui.engine.slots.SlotCache`; then
one decode step runs over every running sequence in one forward call. A step's tokens
reach their callbacks while the next step runs. A sequence leaves when it meets a stop
token, its token cap or its cancellation, or fails, and its slot is reused at the next
boundary. The running sequences stall for at most one boundary's prefill (chunk).
Questions asked together reach the batch a few milliseconds apart (each is checked and
planned on its own); while :class:`Arrivals` counts some still on their way, the
newcomers already waiting are held for them up to ``join_wait_s``, so that all are
encoded and prefilled in one join rather than the first alone and the rest after it.

Everything a request's decoding owns lives in its :class:`Sequence`: its positions and
multimodal rope offset, its sampling options and ``torch.Generator``, its stop tokens and
cancellation, its callbacks. A sequence decoded in a batch yields the tokens it yields
alone (``tests/engine/test_batching.py``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import torch
from transformers import PreTrainedModel

from qwen_ui.engine.batch_prefill import KV, Prefill
from qwen_ui.engine.decode_graphs import DecodeGraphs
from qwen_ui.engine.generate import (
    Outcome,
    Prompt,
    SamplingOptions,
    cache_length,
    prompt_positions,
    sample_on_device,
)
from qwen_ui.engine.prefill_graphs import PrefillGraphs
from qwen_ui.engine.slots import SlotCache, step_mask

log = logging.getLogger(__name__)

HOLD_POLL_S = 0.001  # an idle batch holding its newcomers looks again this often


class Arrivals:
    """How many questions are on their way to the batch: counted from when the engine
    starts checking one until it is handed to the worker (or fails before)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    @property
    def coming(self) -> int:
        return self._count

    @contextlib.contextmanager
    def expected(self) -> Iterator[Callable[[], None]]:
        """Count one question while the block runs; the callable it yields stops counting
        it earlier (once it has reached the worker)."""
        pending = [True]

        def landed() -> None:
            with self._lock:
                if pending[0]:
                    pending[0] = False
                    self._count -= 1

        with self._lock:
            self._count += 1
        try:
            yield landed
        finally:
            landed()


@dataclass(eq=False)
class Sequence:
    """One request's decoding state in the batch."""

    prompt: Prompt
    options: SamplingOptions
    stop_ids: frozenset[int]
    on_token: Callable[[int], None]
    on_finish: Callable[[Outcome], None]
    on_error: Callable[[BaseException], None]
    cancelled: Callable[[], bool]
    tokens: list[int] = field(default_factory=list)
    rope_delta: int = 0
    length: int = 0  # positions in the cache (the prompt and the tokens fed back)
    last: int = -1  # the token the next step is fed
    generator: torch.Generator | None = None

    def __post_init__(self) -> None:
        seed = self.options.seed
        if seed is not None:
            self.generator = torch.Generator(device=self.prompt.input_ids.device)
            self.generator.manual_seed(seed)

    @property
    def needed(self) -> int:
        """The cache positions this sequence may fill."""
        return self.prompt.length + self.options.max_new_tokens

    def decide(self, token: int) -> Outcome | None:
        """Take the next token (its callbacks come later, :class:`Delivery`): the outcome
        when the sequence ends with it, else None."""
        if token in self.stop_ids:
            return Outcome(self.tokens, "stop")
        self.tokens.append(token)
        self.last = token
        if len(self.tokens) >= self.options.max_new_tokens:
            return Outcome(self.tokens, "length")
        if self.cancelled():
            return Outcome(self.tokens, "cancelled")
        return None


@dataclass(frozen=True)
class Delivery:
    """What a sequence's callbacks are yet to hear: a token (None: a stop token, not
    reported) and, when it ended with it, its outcome."""

    seq: Sequence
    token: int | None
    outcome: Outcome | None

    def deliver(self) -> None:
        if self.token is not None:
            self.seq.on_token(self.token)
        if self.outcome is not None:
            self.seq.on_finish(self.outcome)


@dataclass
class Launched:
    """A queued decode step: its sequences (in row order) and their next tokens on the
    device; on CUDA, a copy to pinned host memory queued behind the step, so that
    waiting for these tokens does not wait for a step queued after it."""

    seqs: list[Sequence]
    tokens: torch.Tensor
    host: torch.Tensor | None = None
    done: torch.cuda.Event | None = None

    @classmethod
    def of(cls, seqs: list[Sequence], tokens: torch.Tensor) -> Launched:
        if tokens.device.type != "cuda":
            return cls(seqs, tokens)
        host = torch.empty(tokens.shape, dtype=tokens.dtype, pin_memory=True)
        host.copy_(tokens, non_blocking=True)
        done = torch.cuda.Event()  # type: ignore[no-untyped-call]
        done.record()
        return cls(seqs, tokens, host, done)

    def values(self) -> list[int]:
        """The tokens, once the step is done."""
        if self.host is None or self.done is None:
            return [int(t) for t in self.tokens.tolist()]
        self.done.synchronize()
        return [int(t) for t in self.host.tolist()]


class Entrant(Protocol):
    """A request waiting to join, as the engine hands it over."""

    def cancelled(self) -> bool: ...

    def fail(self, error: BaseException) -> None: ...


E = TypeVar("E", bound=Entrant)
T = TypeVar("T")


class Batch(Generic[E]):
    """The running sequences and the newcomers, stepped by the worker thread only.

    ``prepare(entrants)`` turns newcomers into sequences (it fails or ends the ones it
    cannot, itself); ``model_of()`` is the language model (loaded by then); at most
    ``limit`` sequences run at once; an idle batch keeps its cache up to ``keep_bytes``.
    With ``graphs``, decode steps on CUDA replay CUDA graphs recorded per batch-size
    bucket (:class:`~qwen_ui.engine.decode_graphs.DecodeGraphs`), and the cache holds
    ``limit`` slots from the start (growing it records them again). With
    ``prefill_tokens``, newcomers joining running sequences pass at most that many prompt
    positions (all of them together) per step boundary, the rest at the next ones; with
    none running they pass in one go. With
    ``compile_step`` (e.g. :func:`~qwen_ui.engine.generate.batched_step`), the steps
    recorded at the first cache length run ``compile_step(model)`` in place of the model's
    eager forward (:mod:`~qwen_ui.engine.decode_graphs`). With ``arrivals``, newcomers
    wait up to ``join_wait_s`` after the first of them entered while questions are
    still on their way and there are slots for them. With ``lone_prefill`` (the model's
    recorded prefills, :mod:`~qwen_ui.engine.prefill_graphs`, or None), a newcomer that
    joins alone and whose prompt fits (and, beside running sequences, needs no chunking)
    is prefilled by replaying a recorded graph (one launch, where the padded pass is
    launched kernel by kernel)."""

    def __init__(
        self,
        limit: int,
        prepare: Callable[[list[E]], list[Sequence]],
        model_of: Callable[[], PreTrainedModel],
        keep_bytes: int = 0,
        graphs: bool = False,
        prefill_tokens: int = 0,
        compile_step: Callable[[PreTrainedModel], Callable[..., Any]] | None = None,
        arrivals: Arrivals | None = None,
        join_wait_s: float = 0.0,
        lone_prefill: Callable[[PreTrainedModel], PrefillGraphs | None] | None = None,
    ) -> None:
        self.limit = limit
        self.prepare = prepare
        self.model_of = model_of
        self.keep_bytes = keep_bytes
        self.graphs = graphs
        self.prefill_tokens = prefill_tokens
        self.compile_step = compile_step
        self.arrivals = arrivals
        self.join_wait_s = join_wait_s
        self.lone_prefill = lone_prefill
        self._waiting_since = 0.0  # when the first of the waiting newcomers entered
        self.cache = SlotCache(limit)
        self._graphs: DecodeGraphs | None = None
        self.waiting: list[E] = []
        self.running: list[Sequence] = []  # in slot order
        self._deliveries: list[Delivery] = []  # the last step's, reported during the next
        self._prefilling: Prefill | None = None  # newcomers whose prefill goes on
        self._pending: Launched | None = None  # a replayed step whose tokens are not read

    # --- the worker's view ----------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return bool(
            self.waiting or self.running or self._deliveries or self._prefilling or self._pending
        )

    @property
    def room(self) -> int:
        """How many more newcomers the next boundary can take."""
        prefilling = len(self._prefilling.seqs) if self._prefilling else 0
        return self.limit - len(self.running) - len(self.waiting) - prefilling

    def enter(self, entrant: E) -> None:
        if not self.waiting:
            self._waiting_since = time.perf_counter()
        self.waiting.append(entrant)

    def _holding(self) -> bool:
        """Whether the waiting newcomers wait for questions still on their way."""
        if self.arrivals is None or not self.arrivals.coming:
            return False
        if self.room <= 0:
            return False  # no slot for another one
        return time.perf_counter() - self._waiting_since < self.join_wait_s

    @torch.inference_mode()
    def step(self) -> None:
        """One step boundary: admit the newcomers that fit, then one decode step. The
        step is launched before the previous step's tokens are reported (detokenized and
        sent), so on CUDA that host work overlaps the device's; the host then waits for
        the step's tokens and decides who ends. Replayed steps run one ahead: while the
        running sequences stay the same, the next step is fed the tokens of the one
        before it on the device and queued before the host waits for those tokens, so
        the device does not wait for the host between steps."""
        pending, self._pending = self._pending, None
        holding = bool(self.waiting) and self._holding()
        if pending is not None and self._changing(holding):
            self._settle_guarded(pending)  # the host's view first: the sequences change
            pending = None
        if self._prefilling is not None:
            self._guarded(self._prefilling.seqs, self._continue)
        elif holding:
            if not self.running:
                time.sleep(HOLD_POLL_S)  # nothing to step meanwhile
        elif self.waiting:
            self._admit()
        self._drop_cancelled()
        if pending is not None and pending.seqs != self.running:
            self._settle_guarded(pending)  # fed from the host: its last tokens first
            pending = None
        launched = self._guarded(list(self.running), lambda: self._launch(pending))
        self._report()
        if pending is not None:
            self._settle_guarded(pending)
        if launched is not None:
            if self._graphed(self.model_of()):
                self._pending = launched  # read at the next boundary, after the next launch
            else:
                self._settle_guarded(launched)
        if not self.busy and self.cache.nbytes > self.keep_bytes:
            self.cache.clear()
            if self._graphs is not None:
                self._graphs.release()  # their pool with the cache they were recorded on

    def _changing(self, holding: bool) -> bool:
        """Whether this boundary may change the running sequences before its step (a
        prefill goes on, newcomers join rather than wait, or one was cancelled)."""
        joining = bool(self.waiting) and not holding
        return self._prefilling is not None or joining or any(s.cancelled() for s in self.running)

    def _settle_guarded(self, launched: Launched) -> None:
        self._guarded(launched.seqs, lambda: self._settle(launched))

    # --- joining --------------------------------------------------------------------------
    def _admit(self) -> None:
        free = self.limit - len(self.running)
        entrants, self.waiting = self.waiting[:free], self.waiting[free:]
        try:
            sequences = self.prepare(entrants)
        except Exception as exc:  # the engine's own failures are handled inside prepare
            log.exception("preparing %d newcomers failed", len(entrants))
            for entrant in entrants:
                entrant.fail(exc)
            return
        if sequences:
            self._guarded(sequences, lambda: self._start(sequences))

    def _start(self, sequences: list[Sequence]) -> None:
        """Prefill the newcomers together (their first chunk now, with
        ``prefill_tokens``), or a lone one from a recorded graph."""
        if len(sequences) == 1 and self._replayed_alone(sequences[0]):
            return
        self._prefilling = Prefill(self.model_of(), sequences)
        self._continue()

    def _replayed_alone(self, seq: Sequence) -> bool:
        """Prefill ``seq`` from a recorded graph and let it join, when there are graphs,
        its prompt fits them, and it needs no chunking; else False (nothing done)."""
        model = self.model_of()
        graphs = self.lone_prefill(model) if self.lone_prefill else None
        if graphs is None or not graphs.fits(seq.prompt):
            return False
        if self.running and self.prefill_tokens and seq.prompt.length > self.prefill_tokens:
            return False  # chunked, so that the running answers pause less
        positions, seq.rope_delta = prompt_positions(model, seq.prompt)
        logits = graphs.replay(seq.prompt, positions)
        self._install([seq], graphs.staged(seq.prompt.length), logits)
        return True

    def _continue(self) -> None:
        """The next chunk of the prefill under way; once complete, its sequences join."""
        prefill, self._prefilling = self._prefilling, None
        assert prefill is not None
        columns = 0  # with no answer running, nothing waits for the rest: all at once
        if self.prefill_tokens and self.running:
            columns = max(1, self.prefill_tokens // len(prefill.seqs))
        prefill.advance(columns)
        if prefill.complete:
            self._install(prefill.seqs, prefill.kv, prefill.logits())
        else:
            self._prefilling = prefill

    def _install(self, group: list[Sequence], kv: KV, logits: torch.Tensor) -> None:
        """Prefilled sequences into slots of the cache; their first tokens reported."""
        model = self.model_of()
        needed = max(s.needed for s in [*self.running, *group])
        rows = self.limit if self._graphed(model) else len(self.running) + len(group)
        self.cache.ensure(rows, max(needed, self._compiled_length(model)), kv)
        for row, seq in enumerate(group):
            self.cache.write(len(self.running), kv, row, seq.prompt.length)
            seq.length = seq.prompt.length
            self.running.append(seq)
        self._settle(Launched(group, _pick(group, logits)))
        self._report()  # the first tokens at once

    # --- decoding -------------------------------------------------------------------------
    @torch.inference_mode()
    def _launch(self, chain: Launched | None = None) -> Launched | None:
        """Queue a decode step over the running sequences (None: none run); with
        ``chain``, the last step queued over the same sequences, whose tokens are not
        read yet, the step it is fed from on the device."""
        if not self.running:
            return None
        model = self.model_of()
        seqs = list(self.running)
        logits = None
        if chain is not None and self._graphed(model) and self._graphs is not None:
            logits = self._graphs.chained(chain.tokens)
        if logits is None:
            step = self._replayed if self._graphed(model) else self._eager
            logits = step(model, seqs)
        for seq in seqs:  # the step wrote each one's key and value
            seq.length += 1
        return Launched.of(seqs, _pick(seqs, logits))

    def _settle(self, launched: Launched) -> None:
        """Wait for a step's tokens; each sequence still running takes its own, and the
        ones that end with it leave the batch (their callbacks hear it at :meth:`_report`)."""
        for seq, token in zip(launched.seqs, launched.values(), strict=True):
            if seq not in self.running:  # it ended or failed while the step ran
                continue
            outcome = seq.decide(token)
            stopped = outcome is not None and outcome.finish_reason == "stop"
            self._deliveries.append(Delivery(seq, None if stopped else token, outcome))
            if outcome is not None:
                self._leave(seq)

    def _graphed(self, model: PreTrainedModel) -> bool:
        return self.graphs and model.device.type == "cuda"

    def _compiled_length(self, model: PreTrainedModel) -> int:
        """The cache length the compiled step was recorded for (0: none): a cache allocated
        again after the batch ran dry is at least that long, so that its steps replay the
        compiled graphs (recording them again compiles nothing) rather than eager ones."""
        graphs = self._graphs  # only a graphed batch has them
        if graphs is None or graphs.model is not model:
            return 0
        return graphs.compiled_length or 0

    def _replayed(self, model: PreTrainedModel, seqs: list[Sequence]) -> torch.Tensor:
        if self._graphs is None or self._graphs.model is not model:
            forward = self.compile_step(model) if self.compile_step else None
            self._graphs = DecodeGraphs(model, self.cache, forward=forward)
        return self._graphs.logits(
            [s.last for s in seqs],
            [s.length for s in seqs],
            [s.length + s.rope_delta for s in seqs],
        )

    def _eager(self, model: PreTrainedModel, seqs: list[Sequence]) -> torch.Tensor:
        """The step as one forward call over the running slots, attending over the
        positions the longest of them needs (rounded up to the cache's buckets)."""
        device = model.device
        positions = torch.tensor([s.length for s in seqs], device=device)
        rope = torch.tensor([s.length + s.rope_delta for s in seqs], device=device)
        ids = torch.tensor([[s.last] for s in seqs], device=device)
        kv_len = min(self.cache.length, cache_length(max(s.length for s in seqs) + 1))
        out = model(
            input_ids=ids,
            position_ids=rope.view(1, -1, 1).expand(3, -1, 1),
            cache=self.cache.step_cache(positions, kv_len),
            attention_mask=step_mask(positions, kv_len),
            use_cache=True,
        )
        return out.logits[:, -1, :]  # type: ignore[no-any-return]

    def _report(self) -> None:
        """The callbacks of the tokens decided so far; a sequence whose callback fails
        ends alone (leaving the batch even while a step it is in runs)."""
        deliveries, self._deliveries = self._deliveries, []
        for delivery in deliveries:
            seq = delivery.seq
            try:
                delivery.deliver()
            except Exception as exc:
                if seq in self.running:
                    self._leave(seq)
                self._deliveries = [d for d in self._deliveries if d.seq is not seq]
                seq.on_error(exc)

    def _drop_cancelled(self) -> None:
        for seq in [s for s in self.running if s.cancelled()]:
            self._leave(seq)
            self._deliveries.append(Delivery(seq, None, Outcome(seq.tokens, "cancelled")))

    def _leave(self, seq: Sequence) -> None:
        """Free ``seq``'s slot: the last running sequence moves into it (all its
        positions: a step in flight may be writing the next one)."""
        slot = self.running.index(seq)
        last = self.running.pop()
        if last is not seq:
            self.cache.move(len(self.running), slot, self.cache.length)
            self.running[slot] = last

    def _guarded(self, seqs: list[Sequence], work: Callable[[], T]) -> T | None:
        """``work()``; if it fails, the sequences it concerned fail with its error (the
        others keep running) and None is returned."""
        try:
            return work()
        except Exception as exc:
            log.exception("a batch step failed for %d sequences", len(seqs))
            failed = set(map(id, seqs))
            self._deliveries = [d for d in self._deliveries if id(d.seq) not in failed]
            for seq in seqs:
                if seq in self.running:
                    self._leave(seq)
                seq.on_error(exc)
            return None


def _pick(seqs: Seq[Sequence], logits: torch.Tensor) -> torch.Tensor:
    """Each row's next token ``[rows]``: the argmax, or a draw from the row's own generator."""
    tokens = torch.argmax(logits, dim=-1)
    for row, seq in enumerate(seqs):
        o = seq.options
        if not o.greedy:
            tokens[row] = sample_on_device(
                logits[row : row + 1].float(), o.temperature, o.top_p, seq.generator
            )[0]
    return tokens
