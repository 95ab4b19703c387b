"""The batch's decode step replayed from CUDA graphs, one per batch-size bucket.

An eager decode step is launched by the host kernel by kernel, and on a 7B model the host
is slower than the device (37 tok/s eager against 328 compiled for one stream on the
H200). A graph is one launch. :class:`DecodeGraphs` records the model's forward over the
first ``b`` slots of the :class:`~qwen_ui.engine.slots.SlotCache` for each bucket ``b``
of :data:`~qwen_ui.engine.slots.SLOT_BUCKETS` the batch reaches (the first step at that
size records it: one eager pass, then the capture), reading the step's tokens and
positions from fixed buffers and attending over the cache's whole length under the
step's mask. Rows past the running sequences are padding: token 0 at position 0 of a
free slot, which the next newcomer's prefill overwrites. The graphs share one memory
pool; when the cache is allocated again (it grew, or was cleared while idle: its
``version`` moved on), they are recorded again, into a new pool: the allocator keeps a
pool whose graphs are all gone registered with no user while its blocks are cached, and
asserts (``use_count > 0``) when a capture asks to share it.

With a compiled forward (:func:`~qwen_ui.engine.generate.batched_step`), Inductor compiles
once per bucket and cache length, about 35 s each for the 7B architecture on the H200: so
only the first cache length recorded (the start-up warm-up's) records the compiled
forward; a cache grown past it records the eager one (a fraction of a second) and
decodes slower until the batch runs dry and its cache is allocated at that length again
(the compiled kernels are kept: recording them again compiles nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from qwen_ui.engine.slots import SlotCache, slot_bucket, step_mask

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recorded:
    ids: torch.Tensor  # [b, 1]
    positions: torch.Tensor  # [b]: where each row's new key and value go
    rope: torch.Tensor  # [b]: each row's rope position
    replay: Callable[[], torch.Tensor]  # the logits [b, 1, vocab]
    compiled: bool = False  # recorded from the compiled forward


class DecodeGraphs:
    """Recorded decode steps of ``model`` over ``cache``, by bucket (``record=False``
    runs the same fixed-buffer pass eagerly: the CPU tests' path)."""

    def __init__(
        self,
        model: Any,
        cache: SlotCache,
        record: bool | None = None,
        forward: Callable[..., Any] | None = None,
    ) -> None:
        """``forward``: a compiled ``model.forward`` the steps at the first cache length
        call in place of ``model`` (recorded the same way)."""
        self.model = model
        self.cache = cache
        self.record = model.device.type == "cuda" if record is None else record
        self.compiled = forward
        self.compiled_length: int | None = None  # the cache length compiled for
        self._pool: Any = None
        self._steps: dict[int, Recorded] = {}
        self._version: int | None = None  # the cache allocation the graphs were recorded on
        self._last: tuple[Recorded, int] | None = None  # the last step queued, and its rows

    @property
    def buckets(self) -> list[int]:
        return sorted(self._steps)

    def release(self) -> None:
        """Let the recorded steps and their memory pool go (the cache they read was
        cleared): admission gives that memory back with the cache. The compiled forward
        stays; the next cache's steps record again without compiling."""
        self._steps.clear()
        self._pool = None
        self._last = None
        self._version = None

    def logits(self, ids: list[int], positions: list[int], rope: list[int]) -> torch.Tensor:
        """The next-token logits ``[n, vocab]`` of ``n`` running sequences (slots
        ``0 .. n - 1``), their keys and values written into the cache."""
        n = len(ids)
        if self._version != self.cache.version:
            self._steps.clear()
            self._pool = None  # the dropped graphs' pool may not be shared again
            self._version = self.cache.version
            self._last = None
        bucket = slot_bucket(n, self.cache.slots)
        pad = [0] * (bucket - n)
        fresh = bucket not in self._steps
        step = self._steps[bucket] if not fresh else self._buffers(bucket)
        device = step.ids.device
        step.ids.copy_(torch.tensor([*ids, *pad], device=device).view(-1, 1))
        step.positions.copy_(torch.tensor([*positions, *pad], device=device))
        step.rope.copy_(torch.tensor([*rope, *pad], device=device))
        if fresh:
            step = self._steps[bucket] = self._recorded(step, bucket)
            kind = "compiled" if step.compiled else "eager"
            log.info("decode graph (%s forward) recorded for %d rows", kind, bucket)
        self._last = (step, n)
        return step.replay()[:n, -1, :]

    def chained(self, tokens: torch.Tensor) -> torch.Tensor | None:
        """The step after the last one queued, over the same rows: each fed its token of
        ``tokens`` (``[n]``, on the device: the last step's, possibly not computed yet) at
        its next position. None when there is no such step to continue (nothing queued
        since the cache was allocated)."""
        if self._last is None or self._version != self.cache.version:
            return None
        step, n = self._last
        step.ids[:n, 0].copy_(tokens)
        step.positions[:n].add_(1)
        step.rope[:n].add_(1)
        return step.replay()[:n, -1, :]

    def _buffers(self, rows: int) -> Recorded:
        device = self.cache.keys[0].device
        ids = torch.zeros((rows, 1), dtype=torch.long, device=device)
        positions = torch.zeros(rows, dtype=torch.long, device=device)
        rope = torch.zeros(rows, dtype=torch.long, device=device)
        return Recorded(ids, positions, rope, lambda: torch.empty(0))

    def _claims_compiled(self) -> bool:
        """Whether a step recorded now runs the compiled forward (the first cache length
        recorded claims it)."""
        if self.compiled is None or self.compiled_length not in (None, self.cache.length):
            return False
        self.compiled_length = self.cache.length
        return True

    def _forward(self, step: Recorded) -> torch.Tensor:
        kv_len = self.cache.length
        rows = step.ids.shape[0]
        forward = self.compiled if step.compiled and self.compiled else self.model
        out = forward(
            input_ids=step.ids,
            position_ids=step.rope.view(1, rows, 1).expand(3, rows, 1),
            cache=self.cache.step_cache(step.positions, kv_len),
            attention_mask=step_mask(step.positions, kv_len),
            use_cache=True,
        )
        return out.logits  # type: ignore[no-any-return]

    def _recorded(self, step: Recorded, rows: int) -> Recorded:
        """``step`` with its replay: the graph, or the eager pass where recording is off
        or fails (then for good: the log says why, once). A compiled forward that fails
        is dropped for good, and the model's own is recorded instead."""
        step = Recorded(step.ids, step.positions, step.rope, step.replay, self._claims_compiled())
        if self.record:
            try:
                return self._capture(step)
            except Exception:
                if not step.compiled:
                    log.exception("recording the decode graph for %d rows failed; eager", rows)
                    self.record = False
                else:
                    log.exception("the compiled decode step for %d rows failed; uncompiled", rows)
                    self.compiled = None
                    return self._recorded(step, rows)
        return Recorded(
            step.ids, step.positions, step.rope, lambda: self._forward(step), step.compiled
        )

    def _capture(self, step: Recorded) -> Recorded:
        """The first graph of a cache allocation gets a private memory pool, which the
        later ones share (see the module doc for why it is never shared past them)."""
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # allocates and warms up outside the capture
            self._forward(step)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            logits = self._forward(step)
        if self._pool is None:
            self._pool = graph.pool()

        def replay() -> torch.Tensor:
            graph.replay()
            return logits

        return Recorded(step.ids, step.positions, step.rope, replay, step.compiled)
