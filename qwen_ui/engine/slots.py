"""The batched KV cache of continuous batching: one static tensor per layer for keys and
one for values, ``[slots, kv heads, length, head dim]``, a sequence per slot.

The running sequences occupy slots ``0 .. n - 1`` (a sequence that leaves hands its slot
to the last one, whose keys and values move into it), so a decode step over the batch
reads the first ``n`` slots: one forward call with each row writing its new key and value
at its own position (:class:`SlotLayer`) and attending to its own valid length (the mask
from :meth:`SlotCache.step_mask`). A prefill runs on its own cache and is copied into the
sequence's slot. The tensors grow (in slots and in length, by buckets) when a newcomer
needs more than they hold, keeping the running sequences' keys and values; nothing here
belongs to the shared model object.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from qwen_ui.engine.generate import cache_length
from qwen_ui.engine.shapes import SLOT_BUCKETS, slot_bucket

__all__ = ["SLOT_BUCKETS", "SlotCache", "SlotLayer", "StepView", "slot_bucket", "step_mask"]


class StepView:
    """What one decode step writes and reads: the first ``rows`` slots, each writing at
    its own ``positions[row]``, and the first ``kv_len`` positions of each slot."""

    def __init__(self) -> None:
        self.rows = 0
        self.kv_len = 0
        self.slots: torch.Tensor | None = None  # [rows]: 0 .. rows - 1
        self.positions: torch.Tensor | None = None  # [rows]: where each row writes


class SlotLayer(CacheLayerMixin):  # type: ignore[misc]
    """One decoder layer's keys and values in the batched cache, for a decode step."""

    is_compileable = True
    is_sliding = False

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, view: StepView) -> None:
        super().__init__()
        self.keys = keys
        self.values = values
        self.view = view
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        return None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        view = self.view
        assert view.slots is not None and view.positions is not None
        assert self.keys is not None and self.values is not None
        # an index_put_ on the whole tensor: Inductor writes it in place, where a scatter_
        # into the rows' slice wrote the whole slice back (a copy of every row's cache)
        self.keys[view.slots, :, view.positions] = key_states[:, :, 0]
        self.values[view.slots, :, view.positions] = value_states[:, :, 0]
        return self.keys[: view.rows, :, : view.kv_len], self.values[: view.rows, :, : view.kv_len]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.view.kv_len, 0

    def get_seq_length(self) -> int:
        return self.view.kv_len

    def get_max_length(self) -> int:
        assert self.keys is not None
        return int(self.keys.shape[-2])


class SlotCache:
    """The batch's keys and values by slot, allocated on the first prefill and grown by
    buckets; ``limit`` is the most slots it may hold (settings.max_batch)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.view = StepView()
        self.slot_ids: torch.Tensor | None = None  # [slots]: 0 .. slots - 1, on the device
        # counts the tensors' allocations: a step recorded on them (DecodeGraphs) holds
        # their addresses and is stale once this moves on
        self.version = 0

    @property
    def slots(self) -> int:
        return int(self.keys[0].shape[0]) if self.keys else 0

    @property
    def length(self) -> int:
        return int(self.keys[0].shape[2]) if self.keys else 0

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def clear(self) -> None:
        self.keys, self.values = [], []
        self.slot_ids = None
        self.version += 1

    def ensure(self, rows: int, needed: int, like: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Room for ``rows`` sequences of up to ``needed`` positions; ``like``: one layer's
        (keys, values) per layer of a prefill, which give heads, dims, dtype and device.
        A cache that grows does so a layer at a time, each old layer dropped once copied,
        so that the old cache and the new are never both whole (admission counts one
        layer of the old beside the new); if that fails part way, the cache is cleared
        (its sequences fail at their next step) and the error raised."""
        slots = max(self.slots, slot_bucket(rows, self.limit))
        length = max(self.length, cache_length(needed))
        if slots == self.slots and length == self.length:
            return
        old_slots, old_length = self.slots, self.length
        if not self.keys:
            self.keys = [_zeros(k, slots, length) for k, _ in like]
            self.values = [_zeros(v, slots, length) for _, v in like]
        else:
            try:
                for i, (k, v) in enumerate(like):
                    self.keys[i] = _grown(self.keys[i], k, slots, length, old_slots, old_length)
                    self.values[i] = _grown(self.values[i], v, slots, length, old_slots, old_length)
            except Exception:
                self.clear()
                raise
        # allocated with the cache, outside any graph capture: a step reads a view of it
        self.slot_ids = torch.arange(slots, device=self.keys[0].device)
        self.version += 1

    def write(
        self, slot: int, layers: list[tuple[torch.Tensor, torch.Tensor]], row: int, n: int
    ) -> None:
        """Positions ``0 .. n - 1`` of row ``row`` of a prefill's cache into ``slot``."""
        targets: list[torch.Tensor] = []
        sources: list[torch.Tensor] = []
        for i, (k, v) in enumerate(layers):
            targets += [self.keys[i][slot, :, :n], self.values[i][slot, :, :n]]
            sources += [k[row, :, :n], v[row, :, :n]]
        torch._foreach_copy_(targets, sources)

    def move(self, source: int, target: int, n: int) -> None:
        """Slot ``source``'s first ``n`` positions into slot ``target``."""
        targets: list[torch.Tensor] = []
        sources: list[torch.Tensor] = []
        for tensors in (self.keys, self.values):
            for t in tensors:
                targets.append(t[target, :, :n])
                sources.append(t[source, :, :n])
        torch._foreach_copy_(targets, sources)

    def step_cache(self, positions: torch.Tensor, kv_len: int) -> Cache:
        """The cache of a decode step over the first ``len(positions)`` slots, the row ``r``
        writing at ``positions[r]`` and reading positions ``0 .. kv_len - 1``."""
        rows = int(positions.shape[0])
        view = self.view
        view.rows, view.kv_len = rows, kv_len
        assert self.slot_ids is not None
        view.slots = self.slot_ids[:rows]
        view.positions = positions
        layers = [SlotLayer(k, v, view) for k, v in zip(self.keys, self.values, strict=True)]
        return Cache(layers=layers)


def step_mask(positions: torch.Tensor, kv_len: int) -> torch.Tensor:
    """``[rows, 1, 1, kv_len]``, true where row ``r`` may attend: positions up to and
    including ``positions[r]`` (the one its new token is written at)."""
    span = torch.arange(kv_len, device=positions.device)
    return (span.view(1, -1) <= positions.view(-1, 1)).view(-1, 1, 1, kv_len)


def _grown(
    old: torch.Tensor, like: torch.Tensor, slots: int, length: int, rows: int, kept: int
) -> torch.Tensor:
    """``old`` (``rows`` slots of ``kept`` positions) copied into a larger zero tensor."""
    new = _zeros(like, slots, length)
    new[:rows, :, :kept].copy_(old)
    return new


def _zeros(like: torch.Tensor, slots: int, length: int) -> torch.Tensor:
    shape = (slots, like.shape[1], length, like.shape[3])
    return torch.zeros(shape, dtype=like.dtype, device=like.device)
