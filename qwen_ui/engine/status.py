"""The engine's life cycle, read by /healthz, /readyz, /metrics and the UI."""

from __future__ import annotations

import enum
import threading
import time
from dataclasses import dataclass, field


class EngineState(enum.StrEnum):
    IDLE = "idle"
    LOADING = "loading"
    WARMING = "warming"  # loaded; answering the warm-up question (CUDA graphs, compiling)
    READY = "ready"
    FAILED = "failed"


@dataclass
class EngineStatus:
    """Thread-safe holder of the engine state; transitions are explicit methods."""

    state: EngineState = EngineState.IDLE
    reason: str | None = None
    answered: int = 0
    since: float = field(default_factory=time.time)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _move(self, state: EngineState, reason: str | None = None) -> None:
        with self._lock:
            self.state, self.reason, self.since = state, reason, time.time()

    def loading(self) -> None:
        self._move(EngineState.LOADING)

    def warming(self) -> None:
        self._move(EngineState.WARMING)

    def ready(self) -> None:
        self._move(EngineState.READY)

    def failed(self, reason: str) -> None:
        self._move(EngineState.FAILED, reason)

    def reset(self) -> None:
        self._move(EngineState.IDLE)

    def record_answer(self) -> None:
        with self._lock:
            self.answered += 1

    @property
    def is_ready(self) -> bool:
        """Loaded and has answered at least once (what /readyz promises)."""
        return self.state is EngineState.READY and self.answered > 0

    def not_ready_reason(self) -> str:
        if self.state is EngineState.FAILED:
            return f"engine failed: {self.reason}"
        if self.state is EngineState.WARMING:
            return "engine warming: answering the warm-up question (recording CUDA graphs)"
        if self.state is not EngineState.READY:
            return f"engine {self.state.value}: model not loaded yet"
        return "model loaded but has not answered yet"
