"""The weights ledger: what every loaded model's weights take, and the request budget left.

One ledger serves all models. A model is counted from the moment the registry lets it load
until it is unloaded: by its checkpoint's bytes (5% more on CUDA, as admission assumes for
one model), or by the bytes measured on the device once it loaded when it was the only model
then (a measurement with other models resident would count them too). The admission line
shared by every model gets the device's budget less all counted weights (on the CPU the
request budget is ``cpu_budget_bytes`` alone, as with one model).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from qwen_ui.admission import budget as budgets
from qwen_ui.admission.controller import AdmissionController
from qwen_ui.engine.shapes import ModelFacts, ModelShape, Placement
from qwen_ui.settings import Settings

log = logging.getLogger(__name__)

WEIGHT_FILES = ("*.safetensors", "*.bin")
REQUESTS_SHARE = 4  # CUDA default: a quarter of the device budget stays for requests


def checkpoint_bytes(path: Path) -> int:
    """The bytes of a snapshot's weight files."""
    return sum(f.stat().st_size for pattern in WEIGHT_FILES for f in path.glob(pattern))


def weights_limit(settings: Settings, where: Placement) -> int | None:
    """Most bytes all loaded weights may take (None: no limit)."""
    if settings.model_memory_bytes:
        return settings.model_memory_bytes
    if where.device != "cuda":
        return None
    limit = budgets.device_limit(settings, where)
    return limit - limit // REQUESTS_SHARE


@dataclass
class Counted:
    estimate: int  # checkpoint bytes, with the CUDA overhead
    measured: int | None = None
    shape: ModelShape | None = None

    @property
    def nbytes(self) -> int:
        return self.measured if self.measured is not None else self.estimate


class WeightLedger:
    def __init__(
        self, settings: Settings, where: Placement, controller: AdmissionController
    ) -> None:
        self.settings = settings
        self.where = where
        self.controller = controller
        self.limit = weights_limit(settings, where)
        self._counted: dict[int, Counted] = {}  # by the served model's key
        self._shapes: dict[int, ModelShape] = {}  # told before the model was counted

    def estimate(self, checkpoint: int) -> int:
        """What ``checkpoint`` bytes of weights are counted as before any measurement."""
        if self.where.device != "cuda":
            return checkpoint
        return int(checkpoint * budgets.WEIGHT_OVERHEAD)

    @property
    def total(self) -> int:
        return sum(c.nbytes for c in self._counted.values())

    def fits(self, nbytes: int) -> bool:
        return self.limit is None or self.total + nbytes <= self.limit

    def add(self, key: int, nbytes: int) -> None:
        self._counted[key] = Counted(nbytes, shape=self._shapes.get(key))
        self._apply()

    def remove(self, key: int) -> None:
        self._shapes.pop(key, None)
        if self._counted.pop(key, None) is not None:
            self._apply()

    def observed(self, key: int, facts: ModelFacts | None, resident: int | None) -> None:
        """A served model's facts (its shape) and, once loaded on CUDA, the device's
        resident bytes; trusted as its weights only when no other model is counted."""
        if facts is not None:
            self._shapes[key] = facts.shape
        counted = self._counted.get(key)
        if counted is None:
            return
        if facts is not None:
            counted.shape = facts.shape
        if resident is not None and len(self._counted) == 1:
            counted.measured = resident
        self._apply()

    def _apply(self) -> None:
        shapes = [c.shape for c in self._counted.values() if c.shape is not None]
        shape = max(shapes, key=lambda s: s.kv_bytes_per_token, default=None)
        resident = self.total if self._counted else None
        budget = budgets.request_budget(self.settings, self.where, resident, 0, shape)
        self.controller.set_budget(budget)
