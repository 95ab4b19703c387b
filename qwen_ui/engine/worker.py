"""One worker thread owns the model; jobs reach it through a queue.

A job is a function run on the worker thread. What it emits (stage and token events) and
how it ends (a result or an exception) flow back to the asyncio side through
``loop.call_soon_threadsafe`` into the job's own ``asyncio.Queue``. Cancelling a job sets a
flag the job checks between steps; a job cancelled while still queued never starts.

A job may :meth:`Job.defer` its end: it hands its work to the worker's :class:`Stepper`
(the continuous batch, :mod:`qwen_ui.engine.batching`) and ends later, from there, with
:meth:`Job.finish` or :meth:`Job.fail`. While the stepper is busy the worker alternates:
it runs the jobs queued meanwhile (as many as the stepper has room for), then one step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

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

    def __init__(self, fn: Callable[[Job[T]], T | None], loop: asyncio.AbstractEventLoop) -> None:
        self._fn = fn
        self._loop = loop
        self._inbox: asyncio.Queue[Event | _Finished] = asyncio.Queue()
        self._cancel = threading.Event()
        self.finished = threading.Event()
        self.deferred = False

    # --- worker side ---------------------------------------------------------------
    def emit(self, event: Event) -> None:
        self._send(event)

    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def defer(self) -> None:
        """End later, with :meth:`finish` or :meth:`fail`, not when the function returns."""
        self.deferred = True

    def finish(self, result: T) -> None:
        self._end(_Finished(result=result))

    def fail(self, error: BaseException) -> None:
        self._end(_Finished(error=error))

    def _end(self, item: _Finished) -> None:
        if not self.finished.is_set():
            self._send(item)
            self.finished.set()

    def _send(self, item: Event | _Finished) -> None:
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody listens any more
            self._loop.call_soon_threadsafe(self._inbox.put_nowait, item)

    def _run(self) -> None:
        try:
            if self._cancel.is_set():
                self._end(_Finished())
                return
            result = self._fn(self)
            if not self.deferred:
                self._end(_Finished(result=result))
        except BaseException as exc:  # handed to the asyncio side, which re-raises it
            self._end(_Finished(error=exc))

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


class Stepper(Protocol):
    """Work the worker advances step by step between jobs (the continuous batch)."""

    @property
    def busy(self) -> bool: ...

    @property
    def room(self) -> int:
        """How many more queued jobs to run before the next step."""
        ...

    def step(self) -> None: ...


class Worker:
    """The thread that owns the model."""

    def __init__(self, name: str = "qwen-ui-engine", stepper: Stepper | None = None) -> None:
        self._queue: queue.Queue[Job[Any] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._stopped = False
        self._closing = False
        self._current: Job[Any] | None = None
        self._deferred: list[Job[Any]] = []  # jobs that end from the stepper
        self.stepper = stepper

    @property
    def waiting(self) -> int:
        return self._queue.qsize()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()

    def submit(self, fn: Callable[[Job[T]], T | None]) -> Job[T]:
        """Queue ``fn``; its return value is the job's result unless it deferred."""
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
        for job in [self._current, *list(self._deferred)]:
            if job is not None:
                job.cancel()
        if self._thread.is_alive():
            self._thread.join(timeout)
        while not self._queue.empty():  # never leave a waiter hanging
            job = self._queue.get_nowait()
            if job is not None:
                job._send(_Finished(error=EngineStopped()))

    def _loop(self) -> None:
        while True:
            if not self._busy():
                if self._closing:
                    return
                job = self._queue.get()  # idle: wait for work
                if job is None:
                    return
                self._execute(job)
            self._take_more()
            if self._busy():
                self._step()

    def _busy(self) -> bool:
        return self.stepper is not None and self.stepper.busy

    def _take_more(self) -> None:
        """The jobs queued meanwhile, while the stepper has room (none without one)."""
        while self.stepper is not None and self.stepper.room > 0 and not self._closing:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return
            if job is None:  # stopping: the cancelled batch ends within a step
                self._closing = True
                return
            self._execute(job)

    def _execute(self, job: Job[Any]) -> None:
        if self._stopped:
            job.cancel()
        self._current = job
        try:
            job._run()
        finally:
            self._current = None
        if job.deferred and not job.finished.is_set():
            self._deferred.append(job)

    def _step(self) -> None:
        assert self.stepper is not None
        try:
            self.stepper.step()
        except Exception:  # the stepper fails its own sequences; the worker keeps serving
            log.exception("a worker step failed")
        self._deferred = [job for job in self._deferred if not job.finished.is_set()]
