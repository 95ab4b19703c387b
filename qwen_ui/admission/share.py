"""The continuous batch's one shared reservation (``max_batch`` > 1).

The engine's batch keeps one slot cache for all its sequences (:mod:`qwen_ui.engine.slots`):
``slots x longest`` positions, grown by buckets when a newcomer needs more slots or a
longer cache, never shrunk while a sequence runs, and dropped (or kept idle within
``static_cache_pool_bytes``, which the budget already leaves out) once the batch is empty.
Reserving each request's peak alone would count that cache once per request: with graphed
decode steps every request's peak holds all the slots, so a batch of ``n`` reserved about
``n`` times what it allocates.

:class:`BatchShare` holds instead what the batch as a whole needs
(:func:`~qwen_ui.admission.estimate.slot_batch_total`): the slot cache sized for its
longest member and its most members at once since it was last empty, a decode step over
the running rows, and the newcomers' own work (their images and their prefill) beside it.
Joining one by one, the share ends at the batch's need for all its members. A request
joining the batch is charged the growth of that need: its own transient work, plus the
cache's growth when it is the longest (or makes more slots). A request leaving gives back
its transient work; the cache stays reserved, as the engine keeps it, until the batch is
empty. For a single request the share is that request's own estimate.
"""

from __future__ import annotations

from qwen_ui.admission.estimate import RequestShape, cache_positions, slot_batch_total
from qwen_ui.engine.shapes import ModelShape


class BatchShare:
    """The batch's members (by ticket number), the cache they made, and its bytes."""

    def __init__(self, model: ModelShape) -> None:
        self.model = model
        self._members: dict[int, RequestShape] = {}
        self._rows = 0  # most members at once since the batch was last empty
        self._departed = 0  # longest cache of the members that left since then
        self.held = 0

    @property
    def members(self) -> int:
        return len(self._members)

    def alone(self, shape: RequestShape) -> int:
        """What ``shape`` needs in an empty batch (its estimate's total)."""
        return slot_batch_total([shape], self.model)

    def need(self, joining: RequestShape | None = None) -> int:
        """What the batch needs with its members (and ``joining``)."""
        shapes = [*self._members.values(), *([joining] if joining is not None else [])]
        return slot_batch_total(shapes, self.model, self._rows, self._departed)

    def growth(self, shape: RequestShape) -> int:
        """The bytes ``shape`` joining would add to the share."""
        return max(0, self.need(shape) - self.held)

    def join(self, key: int, shape: RequestShape) -> int:
        """``shape`` joins as ``key``; the bytes the share grew by."""
        grown = self.growth(shape)
        self._members[key] = shape
        self._rows = max(self._rows, len(self._members))
        self.held += grown
        return grown

    def leave(self, key: int) -> int:
        """``key`` leaves; the bytes given back (all of them once the batch is empty)."""
        shape = self._members.pop(key)
        if not self._members:
            freed, self.held = self.held, 0
            self._rows = self._departed = 0
            return freed
        self._departed = max(self._departed, cache_positions(shape, self.model))
        need = self.need()
        freed = max(0, self.held - need)
        self.held -= freed
        return freed
