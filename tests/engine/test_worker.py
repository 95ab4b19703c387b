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
