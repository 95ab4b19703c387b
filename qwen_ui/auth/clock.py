"""Wall-clock time for expiry decisions, with an offset tests can move forward."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class Clock:
    offset: float = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds
