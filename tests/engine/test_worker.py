from __future__ import annotations

import asyncio
import threading

import pytest

from qwen_ui.engine.errors import EngineStopped
from qwen_ui.engine.events import Stage
from qwen_ui.engine.worker import Job, Worker


async def test_jobs_run_on_one_thread_and_stream_events() -> None:
    worker = Worker()
    worker.start()
    threads: set[int] = set()

    def work(job: Job[int]) -> int:
        threads.add(threading.get_ident())
        for i in range(3):
            job.emit(Stage("encoding", i + 1, 3))
        return 42

    try:
        for _ in range(3):
            job = worker.submit(work)
            events = [e async for e in job.events()]
            assert [e.index for e in events] == [1, 2, 3]  # type: ignore[attr-defined]
            assert job.result == 42
    finally:
        await asyncio.to_thread(worker.stop)
    assert len(threads) == 1 and threading.get_ident() not in threads


async def test_errors_reach_the_caller() -> None:
    worker = Worker()
    worker.start()

    def boom(job: Job[None]) -> None:
        raise ValueError("bad")

    try:
        with pytest.raises(ValueError, match="bad"):
            async for _ in worker.submit(boom).events():
                pass
    finally:
        await asyncio.to_thread(worker.stop)


async def test_stop_cancels_the_running_job_and_refuses_new_ones() -> None:
    worker = Worker()
    worker.start()
    started = threading.Event()

    def long(job: Job[int]) -> int:
        started.set()
        steps = 0
        while not job.cancelled():
            steps += 1
            threading.Event().wait(0.001)
        return steps

    job = worker.submit(long)
    await asyncio.to_thread(started.wait, 5)
    await asyncio.to_thread(worker.stop, 5)
    async for _ in job.events():
        pass
    assert job.result > 0 and not worker.alive
    with pytest.raises(EngineStopped):
        worker.submit(long)


class Steps:
    """A stepper of the test: each deferred job gets a token event per step and ends
    after ``steps`` of them (or when cancelled, with the count so far)."""

    def __init__(self, steps: int, limit: int = 4) -> None:
        self.steps = steps
        self.limit = limit
        self.jobs: dict[Job[int], int] = {}
        self.sizes: list[int] = []  # the number of jobs in each step

    @property
    def busy(self) -> bool:
        return bool(self.jobs)

    @property
    def room(self) -> int:
        return self.limit - len(self.jobs)

    def enter(self, job: Job[int]) -> None:
        self.jobs[job] = 0
        job.defer()

    def step(self) -> None:
        self.sizes.append(len(self.jobs))
        for job in list(self.jobs):
            self.jobs[job] += 1
            job.emit(Stage("answering", self.jobs[job]))
            if self.jobs[job] >= self.steps or job.cancelled():
                job.finish(self.jobs.pop(job))


async def test_deferred_jobs_end_from_the_stepper_and_share_its_steps() -> None:
    steps = Steps(5)
    worker = Worker(stepper=steps)
    worker.start()
    try:
        jobs = [worker.submit(steps.enter) for _ in range(3)]
        for job in jobs:
            events = [e async for e in job.events()]
            assert [e.index for e in events] == [1, 2, 3, 4, 5]  # type: ignore[attr-defined]
            assert job.result == 5
        assert max(steps.sizes) > 1  # jobs queued meanwhile joined between steps
        plain = worker.submit(lambda _job: 7)  # an ordinary job still ends on its return
        assert [e async for e in plain.events()] == [] and plain.result == 7
    finally:
        await asyncio.to_thread(worker.stop)


async def test_stop_cancels_the_deferred_jobs() -> None:
    steps = Steps(10**9)
    worker = Worker(stepper=steps)
    worker.start()
    job = worker.submit(steps.enter)
    async for event in job.events():
        if event.index >= 3:  # type: ignore[attr-defined]
            break
    await asyncio.to_thread(worker.stop, 5)
    async for _ in job.events():
        pass
    assert job.result >= 3 and not worker.alive and not steps.busy
