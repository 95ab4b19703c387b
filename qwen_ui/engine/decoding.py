"""The host memory budget that image decoding is counted against, before any pixel is
decoded.

:meth:`DecodeBudget.pixels` asks a checked image what its decode takes at its peak
(:meth:`~qwen_ui.engine.images.CheckedImage.decode_cost`, from the header), holds that many
bytes of the budget, decodes in a thread and lets go once the decode has ended (however
the request ends: a cancelled request's decode is still counted until its thread is done).
Decodes that do not fit beside the ones running wait in arrival order, at most
``timeout_s`` (then :class:`~qwen_ui.engine.errors.DecodeBusy`); one that could never fit
is refused at once with :class:`~qwen_ui.engine.errors.ImageDecodeBudget`. The app builds
one budget for every engine it serves (:class:`qwen_ui.models.host.EngineHost`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from PIL import Image

from qwen_ui.engine.errors import DecodeBusy, ImageDecodeBudget
from qwen_ui.engine.images import CheckedImage
from qwen_ui.settings import Settings

log = logging.getLogger(__name__)

MiB = 1024 * 1024


def _future() -> asyncio.Future[None]:
    return asyncio.get_running_loop().create_future()


@dataclass(eq=False)
class _Waiter:
    nbytes: int
    granted: asyncio.Future[None] = field(default_factory=_future)


class DecodeBudget:
    """Bytes of host memory for decoding images, shared by every request."""

    def __init__(self, capacity: int, timeout_s: float) -> None:
        self.capacity = capacity
        self.timeout_s = timeout_s
        self.in_use = 0
        self.max_in_use = 0  # since start
        self._waiting: deque[_Waiter] = deque()

    @classmethod
    def from_settings(cls, settings: Settings) -> DecodeBudget:
        return cls(settings.decode_budget_bytes, settings.queue_timeout_s)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def refuse_never_fitting(self, nbytes: int, index: int) -> None:
        """:class:`ImageDecodeBudget` for image ``index`` when ``nbytes`` exceed the
        whole budget."""
        if nbytes > self.capacity:
            raise ImageDecodeBudget(index=index, needed=_mib(nbytes), budget=_mib(self.capacity))

    async def check(self, image: CheckedImage) -> None:
        """Refuse ``image`` now if its decode could never fit (before anything is kept)."""
        self.refuse_never_fitting(await asyncio.to_thread(image.decode_cost), image.index)

    async def pixels(self, image: CheckedImage) -> Image.Image:
        """``image``'s pixels, decoded (in a thread) while its cost is held."""
        if image.decoded:
            return image.image
        cost = await asyncio.to_thread(image.decode_cost)
        async with self.hold(cost, image.index):
            work = asyncio.ensure_future(asyncio.to_thread(image.load))
            try:
                return await asyncio.shield(work)
            except asyncio.CancelledError:
                await asyncio.wait({work})  # its pixels stay counted until the thread ends
                raise

    @asynccontextmanager
    async def hold(self, nbytes: int, index: int) -> AsyncIterator[None]:
        """Hold ``nbytes`` of the budget for the block (for image ``index``)."""
        self.refuse_never_fitting(nbytes, index)
        await self._acquire(nbytes)
        try:
            yield
        finally:
            self._release(nbytes)

    async def _acquire(self, nbytes: int) -> None:
        if not self._waiting and self.in_use + nbytes <= self.capacity:
            self._take(nbytes)
            return
        waiter = _Waiter(nbytes)
        self._waiting.append(waiter)
        log.debug("decode waits for %d MiB (%d MiB in use)", nbytes // MiB, self.in_use // MiB)
        try:
            async with asyncio.timeout(self.timeout_s):
                await asyncio.shield(waiter.granted)
        except TimeoutError:
            if waiter.granted.done():  # granted in the same instant: keep it
                return
            self._leave(waiter)
            seconds = max(1, round(self.timeout_s / 4))
            raise DecodeBusy(
                retry_after=seconds, waited=round(self.timeout_s), seconds=seconds
            ) from None
        except BaseException:  # cancelled while waiting, or just granted
            if waiter.granted.done():
                self._release(nbytes)
            else:
                self._leave(waiter)
            raise

    def _take(self, nbytes: int) -> None:
        self.in_use += nbytes
        self.max_in_use = max(self.max_in_use, self.in_use)

    def _leave(self, waiter: _Waiter) -> None:
        self._waiting.remove(waiter)
        waiter.granted.cancel()
        self._pump()

    def _release(self, nbytes: int) -> None:
        self.in_use -= nbytes
        self._pump()

    def _pump(self) -> None:
        """Grant waiters in arrival order while the first one fits (none overtakes it)."""
        while self._waiting and self.in_use + self._waiting[0].nbytes <= self.capacity:
            waiter = self._waiting.popleft()
            self._take(waiter.nbytes)
            waiter.granted.set_result(None)


def _mib(nbytes: int) -> str:
    return f"{nbytes / MiB:,.0f}"
