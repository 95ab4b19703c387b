"""An offered model (:class:`Entry`) and one engine serving it (:class:`Served`).

An entry lives as long as the model is offered; it keeps one life-cycle status for the
model (what ``/healthz`` and ``/metrics`` show) and its current engine, created on the
model's first question. A served engine counts the requests it runs; once retired (its
model is no longer offered, or its store ref moved to another snapshot) it takes no new
request and is closed when the last one finishes.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from qwen_ui.engine.status import EngineState, EngineStatus
from qwen_ui.models.refs import ModelRef

if TYPE_CHECKING:
    from qwen_ui.engine.engine import Engine
    from qwen_ui.engine.remote import RemoteEngine
    from qwen_ui.models.admission import ModelAdmission


class ModelState(enum.StrEnum):
    NOT_LOADED = "not_loaded"
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"


@dataclass(eq=False)
class Served:
    """One engine of one model, and the requests it runs."""

    name: str
    engine: Engine | RemoteEngine
    admission: ModelAdmission | None
    key: int
    status: EngineStatus
    in_flight: int = 0
    last_used: float = field(default_factory=time.monotonic)
    counted: bool = False  # its weights are in the ledger (it may load)
    retired: bool = False
    closed: bool = False
    snapshot_id: str | None = None

    @property
    def idle(self) -> bool:
        return self.in_flight == 0


@dataclass(eq=False)
class Entry:
    """One offered model."""

    name: str  # OWNER/NAME@REV, or the remote's model name
    ref: ModelRef | None  # None: a remote model
    current: Served | None = None
    _idle: EngineStatus = field(default_factory=EngineStatus)

    @property
    def status(self) -> EngineStatus:
        """The current engine's life cycle (idle while the model has none)."""
        return self.current.status if self.current is not None else self._idle

    @property
    def state(self) -> ModelState:
        if self.status.state is EngineState.FAILED:
            return ModelState.FAILED
        served = self.current
        if served is None or served.closed:
            return ModelState.NOT_LOADED
        if self.status.state is EngineState.READY:
            return ModelState.READY
        if self.ref is None:  # a remote model: nothing loads here
            return ModelState.READY
        if served.counted or self.status.state is EngineState.LOADING:
            return ModelState.LOADING
        return ModelState.NOT_LOADED
