"""Admission by count, for engines whose memory is not ours (a remote model server): at
most ``limit`` questions at once, the rest wait in line (first come, first served) up to
``queue_max`` of them, each for at most ``timeout_s``. Same busy errors as the VRAM
controller; a slot is released on every exit path, cancellation included."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from qwen_ui.admission.errors import QueueFull, QueueTimeout

RETRY_S = 5.0


class CountGate:
    """Callable as the engine's admission seam: ``gate(request, images, report)``."""

    def __init__(self, limit: int, queue_max: int, timeout_s: float) -> None:
        self.limit = limit
        self.queue_max = queue_max
        self.timeout_s = timeout_s
        self.active = 0
        self._waiting: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return sum(1 for f in self._waiting if not f.done())

    def __call__(
        self, request: Any, images: Sequence[Any], report: Callable[..., None]
    ) -> AbstractAsyncContextManager[None]:
        return self.slot(report)

    @asynccontextmanager
    async def slot(self, report: Callable[..., None] | None = None) -> AsyncIterator[None]:
        await self._acquire(report)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, report: Callable[..., None] | None) -> None:
        if self.active < self.limit and not self.waiting:
            self.active += 1
            return
        if self.waiting >= self.queue_max:
            raise QueueFull(retry_after=RETRY_S, waiting=self.waiting, seconds=round(RETRY_S))
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        if report is not None:
            report(self.waiting - 1)
        try:
            await asyncio.wait_for(asyncio.shield(turn), self.timeout_s)
        except TimeoutError:
            self._leave(turn)
            raise QueueTimeout(
                retry_after=RETRY_S, waited=round(self.timeout_s), seconds=round(RETRY_S)
            ) from None
        except asyncio.CancelledError:
            self._leave(turn)
            raise

    def _leave(self, turn: asyncio.Future[None]) -> None:
        """Out of line; a slot handed over meanwhile is passed on."""
        if turn.done() and not turn.cancelled():
            self._release()
            return
        turn.cancel()
        if turn in self._waiting:
            self._waiting.remove(turn)

    def _release(self) -> None:
        while self._waiting:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_result(None)  # the slot goes straight to the next in line
                return
        self.active -= 1
