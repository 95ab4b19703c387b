"""One worker thread owns the model; jobs reach it through a queue.

A job is a function run on the worker thread. What it emits (stage and token events) and
how it ends (a result or an exception) flow back to the asyncio side through
``loop.call_soon_threadsafe`` into the job's own ``asyncio.Queue``. Cancelling a job sets a
flag the job checks between steps; a job cancelled while still queued never starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from qwen_ui.engine.errors import EngineStopped
from qwen_ui.engine.events import Event

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class _Finished:
    result: Any = None
    error: BaseException | None = None


class Job(Generic[T]):
    """A unit of work for the worker, and the asyncio side's view of its progress."""

    def __init__(self, fn: Callable[[Job[T]], T], loop: asyncio.AbstractEventLoop) -> None:
        self._fn = fn
        self._loop = loop
        self._inbox: asyncio.Queue[Event | _Finished] = asyncio.Queue()
        self._cancel = threading.Event()
        self.finished = threading.Event()

    # --- worker side ---------------------------------------------------------------
    def emit(self, event: Event) -> None:
        self._send(event)

    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def _send(self, item: Event | _Finished) -> None:
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody listens any more
            self._loop.call_soon_threadsafe(self._inbox.put_nowait, item)

    def _run(self) -> None:
        try:
            if self._cancel.is_set():
                self._send(_Finished())
                return
            self._send(_Finished(result=self._fn(self)))
        except BaseException as exc:  # handed to the asyncio side, which re-raises it
            self._send(_Finished(error=exc))
        finally:
            self.finished.set()

    # --- asyncio side --------------------------------------------------------------
    def cancel(self) -> None:
        self._cancel.set()

    async def events(self) -> AsyncIterator[Event]:
        """The job's events until it ends; then ``self.result`` is set (or it raises)."""
        while True:
            item = await self._inbox.get()
            if isinstance(item, _Finished):
                if item.error is not None:
                    raise item.error
                self.result: T = item.result
                return
            yield item


class Worker:
    """The thread that owns the model."""

    def __init__(self, name: str = "qwen-ui-engine") -> None:
        self._queue: queue.Queue[Job[Any] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._stopped = False
        self._current: Job[Any] | None = None

    @property
    def waiting(self) -> int:
        return self._queue.qsize()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()

    def submit(self, fn: Callable[[Job[T]], T]) -> Job[T]:
        if self._stopped:
            raise EngineStopped()
        job: Job[T] = Job(fn, asyncio.get_running_loop())
        self._queue.put(job)
        return job

    def stop(self, timeout: float = 30.0) -> None:
        """Refuse new jobs, cancel the running one (it stops within a decoding step) and
        fail the queued ones."""
        self._stopped = True
        self._queue.put(None)
        current = self._current
        if current is not None:
            current.cancel()
        if self._thread.is_alive():
            self._thread.join(timeout)
        while not self._queue.empty():  # never leave a waiter hanging
            job = self._queue.get_nowait()
            if job is not None:
                job._send(_Finished(error=EngineStopped()))

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            if self._stopped:
                job.cancel()
            self._current = job
            try:
                job._run()
            finally:
                self._current = None
