"""The controller alone: fits, waits, FIFO, tenant limits, bounds, and release on every
exit path. Short real timeouts; every wait is bounded by ``asyncio.timeout``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry

from qwen_ui.admission.controller import AdmissionController
from qwen_ui.admission.errors import NeverFits, QueueFull, QueueTimeout
from qwen_ui.admission.metrics import AdmissionMetrics


def controller(
    budget: int = 100,
    queue_max: int = 10,
    timeout_s: float = 5.0,
    limits: dict[str, int] | None = None,
) -> AdmissionController:
    limit_of: Callable[[str], int] = lambda tenant: (limits or {}).get(tenant, 100)  # noqa: E731
    metrics = AdmissionMetrics(CollectorRegistry())
    return AdmissionController(
        budget, queue_max=queue_max, timeout_s=timeout_s, tenant_limit=limit_of, metrics=metrics
    )


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


class Holder:
    """A task that reserves, records when it got in, and holds until told to go."""

    def __init__(self, ctl: AdmissionController, tenant: str, nbytes: int, log: list[str]):
        self.ctl, self.tenant, self.nbytes, self.log = ctl, tenant, nbytes, log
        self.go = asyncio.Event()
        self.reports: list[tuple[int, float]] = []
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async with self.ctl.reserve(self.tenant, self.nbytes, self._report):
            self.log.append(f"{self.tenant}:{self.nbytes}")
            await self.go.wait()

    def _report(self, ahead: int, wait_s: float) -> None:
        self.reports.append((ahead, wait_s))

    async def finish(self) -> None:
        self.go.set()
        async with asyncio.timeout(2):
            await self.task


async def test_fits_at_once_and_releases() -> None:
    ctl = controller()
    async with ctl.reserve("a", 60) as grant:
        assert grant.nbytes == 60 and ctl.in_use == 60 and ctl.inflight("a") == 1
        async with ctl.reserve("b", 40):
            assert ctl.in_use == 100
    assert ctl.in_use == 0 and ctl.inflight("a") == 0 and ctl.max_in_use == 100


async def test_waits_for_room_and_reports_its_position() -> None:
    ctl, log = controller(), []
    first = Holder(ctl, "a", 80, log)
    await settle()
    second = Holder(ctl, "b", 50, log)
    await settle()
    assert log == ["a:80"] and ctl.waiting == 1
    assert second.reports and second.reports[0][0] == 0 and second.reports[0][1] > 0
    await first.finish()
    await settle()
    assert log == ["a:80", "b:50"] and ctl.in_use == 50
    await second.finish()
    assert ctl.in_use == 0


async def test_fifo_nobody_overtakes_a_request_waiting_for_room() -> None:
    ctl, log = controller(), []
    big = Holder(ctl, "a", 100, log)
    await settle()
    waiters = [Holder(ctl, t, n, log) for t, n in (("b", 60), ("c", 60), ("d", 30))]
    await settle()
    assert [w.reports[0][0] for w in waiters] == [0, 1, 2]
    await big.finish()
    await settle()
    assert log == ["a:100", "b:60"]  # d (30) would fit beside b but must not pass c
    await waiters[0].finish()
    await settle()
    assert log == ["a:100", "b:60", "c:60", "d:30"]
    assert [r[0] for r in waiters[2].reports] == [2, 1]  # reported as the line moved
    for waiter in waiters[1:]:
        await waiter.finish()
    assert ctl.in_use == 0 and ctl.max_in_use <= ctl.budget


async def test_a_tenant_at_its_limit_lets_others_pass() -> None:
    ctl, log = controller(limits={"a": 1}), []
    a1 = Holder(ctl, "a", 10, log)
    await settle()
    a2 = Holder(ctl, "a", 10, log)
    b1 = Holder(ctl, "b", 10, log)
    await settle()
    assert log == ["a:10", "b:10"] and ctl.inflight("a") == 1 and ctl.waiting == 1
    await a1.finish()
    await settle()
    assert log == ["a:10", "b:10", "a:10"] and ctl.inflight("a") == 1
    await a2.finish()
    await b1.finish()
    assert ctl.in_use == 0


async def test_wait_is_bounded_by_a_busy_error() -> None:
    ctl, log = controller(timeout_s=0.05), []
    holder = Holder(ctl, "a", 100, log)
    await settle()
    with pytest.raises(QueueTimeout) as caught:
        async with ctl.reserve("b", 10):
            pytest.fail("admitted while the budget was taken")
    error = caught.value
    assert error.status == 503 and error.retry_after is not None and error.retry_after >= 1
    assert "retry in" in error.message("en") and "秒后重试" in error.message("zh")
    assert ctl.waiting == 0 and ctl.in_use == 100
    assert ctl.metrics.refusals.labels("timeout")._value.get() == 1
    await holder.finish()
    assert ctl.in_use == 0


async def test_queue_length_is_bounded() -> None:
    ctl, log = controller(queue_max=1), []
    holder = Holder(ctl, "a", 100, log)
    await settle()
    waiter = Holder(ctl, "b", 10, log)
    await settle()
    with pytest.raises(QueueFull) as caught:
        async with ctl.reserve("c", 10):
            pytest.fail("admitted past a full line")
    assert caught.value.status == 503 and (caught.value.retry_after or 0) >= 1
    assert ctl.metrics.refusals.labels("queue_full")._value.get() == 1
    await holder.finish()
    await waiter.finish()
    assert ctl.in_use == 0 and ctl.waiting == 0


async def test_never_fits_is_refused_at_once() -> None:
    ctl = controller(budget=100)
    with pytest.raises(NeverFits) as caught:
        async with ctl.reserve("a", 101):
            pytest.fail("admitted beyond the budget")
    assert caught.value.status == 413 and "fewer or smaller images" in caught.value.message()
    assert ctl.waiting == 0 and ctl.metrics.refusals.labels("never_fits")._value.get() == 1


async def test_released_when_the_block_raises() -> None:
    ctl = controller()
    with pytest.raises(RuntimeError):
        async with ctl.reserve("a", 70):
            raise RuntimeError("the answer failed")
    assert ctl.in_use == 0 and ctl.inflight("a") == 0


async def test_released_when_cancelled_while_holding() -> None:
    ctl, log = controller(), []
    holder = Holder(ctl, "a", 70, log)
    await settle()
    assert ctl.in_use == 70
    holder.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await holder.task
    assert ctl.in_use == 0 and ctl.inflight("a") == 0


async def test_cancelled_while_waiting_leaves_the_line() -> None:
    ctl, log = controller(), []
    first = Holder(ctl, "a", 100, log)
    await settle()
    gone = Holder(ctl, "b", 50, log)
    after = Holder(ctl, "c", 50, log)
    await settle()
    gone.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone.task
    assert ctl.waiting == 1 and after.reports[-1][0] == 0  # moved up when b left
    await first.finish()
    await settle()
    assert log == ["a:100", "c:50"] and ctl.in_use == 50
    await after.finish()
    assert ctl.in_use == 0


async def test_cancelled_in_the_instant_it_was_admitted_releases() -> None:
    ctl, log = controller(), []
    first = Holder(ctl, "a", 100, log)
    await settle()
    second = Holder(ctl, "b", 100, log)
    await settle()
    first.go.set()
    await asyncio.sleep(0)  # first releases, which grants second ...
    second.task.cancel()  # ... and second is cancelled before it resumes
    with pytest.raises(asyncio.CancelledError):
        await second.task
    await first.task
    assert ctl.in_use == 0 and ctl.waiting == 0 and ctl.inflight("b") == 0


async def test_a_larger_budget_admits_waiters() -> None:
    ctl, log = controller(budget=50), []
    first = Holder(ctl, "a", 50, log)
    await settle()
    second = Holder(ctl, "b", 50, log)
    await settle()
    assert log == ["a:50"]
    ctl.set_budget(100)
    await settle()
    assert log == ["a:50", "b:50"]
    await first.finish()
    await second.finish()


async def test_metrics_follow_the_state() -> None:
    ctl, log = controller(), []
    m = ctl.metrics
    holder = Holder(ctl, "a", 80, log)
    await settle()
    waiter = Holder(ctl, "b", 30, log)
    await settle()
    assert m.budget._value.get() == 100 and m.in_use._value.get() == 80
    assert m.queue._value.get() == 1
    await holder.finish()
    await settle()
    assert m.in_use._value.get() == 30 and m.queue._value.get() == 0
    await waiter.finish()
    assert m.in_use._value.get() == 0
    count = [s for s in m.wait.collect()[0].samples if s.name.endswith("_count")]
    assert count[0].value == 2


async def test_many_random_holders_never_exceed_the_budget() -> None:
    import random

    ctl = controller(budget=1000, queue_max=1000, limits={"a": 2, "b": 3})
    rng = random.Random(7)
    seen: list[tuple[int, int, int]] = []

    async def one(tenant: str, nbytes: int) -> None:
        async with ctl.reserve(tenant, nbytes):
            seen.append((ctl.in_use, ctl.inflight("a"), ctl.inflight("b")))
            await asyncio.sleep(rng.random() / 200)

    async with asyncio.timeout(10):
        await asyncio.gather(*(one(rng.choice("ab"), rng.randint(1, 600)) for _ in range(200)))
    assert len(seen) == 200 and ctl.in_use == 0 and ctl.waiting == 0
    assert max(s[0] for s in seen) <= 1000 == ctl.budget
    assert max(s[1] for s in seen) <= 2 and max(s[2] for s in seen) <= 3
