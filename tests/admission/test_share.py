"""The continuous batch's shared reservation: what a batch of requests holds from the
budget against :func:`~qwen_ui.admission.estimate.slot_batch_total`, the cache kept until
the batch is empty, a request that grows the cache waiting for room, and the line's rules
(FIFO, tenant limits, positions) unchanged. The 7B AWQ shape with the engine's batching."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry

from qwen_ui.admission.controller import AdmissionController
from qwen_ui.admission.estimate import (
    RequestShape,
    batch_total,
    cache_positions,
    estimate,
    slot_batch_total,
    slot_count,
)
from qwen_ui.admission.metrics import AdmissionMetrics
from qwen_ui.admission.share import BatchShare
from qwen_ui.engine.shapes import ModelShape
from tests.admission.test_estimate import _batching_7b, grid

GiB = 1 << 30
KV_7B = 56 * 1024  # bytes per position of the 7B's KV cache (bf16)

# one image of 28 x 28 merged patches (784 tokens) and answers of mixed lengths
SHORT = RequestShape([grid(28)], 784, 100, 256)  # 1,140 positions: 1,280 per slot
MEDIUM = RequestShape([grid(20)], 400, 80, 1500)  # 1,980: 2,048
LONG = RequestShape([grid(28)], 784, 100, 4096)  # 4,980: 5,120
TEXT = RequestShape([], 0, 300, 700)  # no image: 1,000 positions: 1,024
MIXED = [SHORT, LONG, MEDIUM, TEXT, SHORT, MEDIUM, TEXT, LONG]


def controller(
    model: ModelShape, budget: int = 60 * GiB, limits: dict[str, int] | None = None
) -> AdmissionController:
    limit_of: Callable[[str], int] = lambda tenant: (limits or {}).get(tenant, 100)  # noqa: E731
    ctl = AdmissionController(
        budget,
        queue_max=20,
        timeout_s=5.0,
        tenant_limit=limit_of,
        metrics=AdmissionMetrics(CollectorRegistry()),
    )
    ctl.use_share(BatchShare(model))
    return ctl


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


class Member:
    """A request that holds its part of the batch until told to leave."""

    def __init__(self, ctl: AdmissionController, shape: RequestShape, tenant: str = "t") -> None:
        self.ctl, self.shape, self.tenant = ctl, shape, tenant
        self.inside = asyncio.Event()
        self.go = asyncio.Event()
        self.reports: list[int] = []
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        alone = slot_batch_total([self.shape], self.ctl.share.model)  # type: ignore[union-attr]
        report = lambda ahead, _wait: self.reports.append(ahead)  # noqa: E731
        async with self.ctl.reserve(self.tenant, alone, report, self.shape):
            self.inside.set()
            await self.go.wait()

    async def leave(self) -> None:
        self.go.set()
        async with asyncio.timeout(2):
            await self.task


async def _join(ctl: AdmissionController, shapes: list[RequestShape]) -> list[Member]:
    members = []
    for shape in shapes:
        members.append(Member(ctl, shape))
        await settle()
    return members


@pytest.mark.parametrize("graphs", [True, False], ids=["graphed", "eager"])
@pytest.mark.parametrize("n", [1, 2, 8])
async def test_a_batch_reserves_what_it_allocates(n: int, graphs: bool) -> None:
    """The reservations of ``n`` requests of mixed lengths sum to the batch's need (its
    slot cache once, at the longest length), not to ``n`` lone requests' peaks."""
    model = _batching_7b(8, graphs)
    shapes = MIXED[:n]
    ctl = controller(model)
    members = await _join(ctl, shapes)
    assert all(m.inside.is_set() for m in members)
    assert ctl.in_use == slot_batch_total(shapes, model) == batch_total(shapes, model)
    longest = max(cache_positions(s, model) for s in shapes)
    slots = slot_count(n, model)
    assert ctl.in_use >= slots * longest * KV_7B  # the slot cache, once
    lone = sum(estimate(s, model).total for s in shapes)
    if n == 1:
        assert ctl.in_use == lone
    elif graphs:  # each lone estimate holds all eight slots: reserved once now
        assert ctl.in_use < (lone if n == 2 else lone / 2)
    for m in members:
        await m.leave()
    assert ctl.in_use == 0


async def test_the_formula_by_hand() -> None:
    """Two requests in a graphed batch: eight slots of the longer one's length, beside
    them the newcomer's prefill (its prompt's keys and values and the pass's activations,
    under 1 GiB), or one layer of the shorter cache while the cache grows layer by layer,
    whichever is larger."""
    model = _batching_7b(8, True)
    ctl = controller(model)
    members = await _join(ctl, [SHORT, LONG])
    cache = 8 * 5120 * KV_7B
    prompt = 884 * KV_7B  # the newcomer's keys and values, prefilled beside the cache
    layer = 8 * 1280 * KV_7B // 56  # one layer's keys of the shorter cache, while copied
    peak = ctl.in_use - ctl.in_use // 26  # less the 4 % workspace share (approximately)
    assert cache + max(prompt, layer) < peak < cache + prompt + GiB
    for m in members:
        await m.leave()


async def test_the_cache_stays_reserved_until_the_batch_is_empty() -> None:
    """A long request leaving keeps its slot length reserved (the engine keeps the cache
    while the batch runs); the last one leaving gives everything back."""
    model = _batching_7b(8, True)
    ctl = controller(model)
    short, long, other = await _join(ctl, [SHORT, LONG, SHORT])
    with_long = ctl.in_use
    await long.leave()
    assert ctl.in_use >= 8 * 5120 * KV_7B  # the long cache is still there
    assert ctl.in_use <= with_long
    # a newcomer as long as the cache already is adds prefill work, not a second cache
    before = ctl.in_use
    again = Member(ctl, LONG)
    await settle()
    assert again.inside.is_set()
    assert 0 < ctl.in_use - before < 8 * 5120 * KV_7B // 4
    for m in (short, other, again):
        await m.leave()
    assert ctl.in_use == 0 and ctl.share is not None and ctl.share.held == 0


async def test_a_request_that_grows_the_cache_waits_for_room() -> None:
    """The budget holds two short requests, or a long one alone, but not the long cache
    beside a running batch: the long one waits while short ones run (a short one behind
    it does not overtake it), gets in once the batch is empty, and the short one behind
    it waits for the long one to leave."""
    model = _batching_7b(8, True)
    budget = slot_batch_total([LONG], model) + 64 * 1024 * 1024
    assert slot_batch_total([SHORT, SHORT], model) <= budget
    assert slot_batch_total([SHORT, LONG], model) > budget
    ctl = controller(model, budget)
    a, b = await _join(ctl, [SHORT, SHORT])
    long = Member(ctl, LONG)
    await settle()
    behind = Member(ctl, SHORT)
    await settle()
    assert not long.inside.is_set() and not behind.inside.is_set()  # FIFO: no overtaking
    assert long.reports[-1] == 0 and behind.reports[-1] == 1
    await a.leave()
    await settle()
    assert not long.inside.is_set()  # b's cache is still there: no room to grow it
    await b.leave()
    await settle()
    assert long.inside.is_set() and not behind.inside.is_set()
    assert ctl.in_use == slot_batch_total([LONG], model) and behind.reports[-1] == 0
    await long.leave()
    await settle()
    assert behind.inside.is_set() and ctl.in_use == slot_batch_total([SHORT], model)
    await behind.leave()
    assert ctl.in_use == 0


async def test_tenant_limits_hold_in_a_batch() -> None:
    model = _batching_7b(8, True)
    ctl = controller(model, limits={"a": 1})
    first = Member(ctl, SHORT, "a")
    await settle()
    second = Member(ctl, SHORT, "a")
    other = Member(ctl, SHORT, "b")
    await settle()
    assert first.inside.is_set() and other.inside.is_set() and not second.inside.is_set()
    assert ctl.inflight("a") == 1 and ctl.in_use == slot_batch_total([SHORT, SHORT], model)
    await first.leave()
    await settle()
    assert second.inside.is_set()
    await second.leave()
    await other.leave()
    assert ctl.in_use == 0


async def test_cancelled_while_waiting_leaves_the_share_untouched() -> None:
    model = _batching_7b(8, True)
    budget = slot_batch_total([LONG], model) + 1  # alone, not beside a running batch
    ctl = controller(model, budget)
    first = Member(ctl, SHORT)
    await settle()
    held = ctl.in_use
    waiting = Member(ctl, LONG)
    await settle()
    waiting.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting.task
    assert ctl.in_use == held and ctl.share is not None and ctl.share.members == 1
    await first.leave()
    assert ctl.in_use == 0 and ctl.waiting == 0


async def test_requests_without_a_shape_reserve_their_bytes_beside_the_share() -> None:
    model = _batching_7b(8, True)
    ctl = controller(model)
    member = Member(ctl, SHORT)
    await settle()
    shared = ctl.in_use
    async with ctl.reserve("x", 1000):
        assert ctl.in_use == shared + 1000
    assert ctl.in_use == shared
    await member.leave()
    assert ctl.in_use == 0


async def test_each_served_model_joins_its_own_batch_share() -> None:
    """Two models on one line (qwen_ui.models): each request joins its own model's share,
    so one model's batch never sizes the other's cache."""
    model = _batching_7b()
    ctl = controller(model)
    other = BatchShare(model)
    alone = slot_batch_total([SHORT], model)
    async with ctl.reserve("t", alone, None, SHORT, other):
        assert other.members == 1 and ctl.share is not None and ctl.share.members == 0
        async with ctl.reserve("t", alone, None, LONG):
            assert ctl.share.members == 1 and other.members == 1
            assert ctl.in_use == other.held + ctl.share.held
    assert ctl.in_use == 0 and other.members == 0
