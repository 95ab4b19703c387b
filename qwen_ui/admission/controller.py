"""The budget and the line: reserve bytes for a tenant, wait in FIFO order, always release.

Rules, applied every time the line may move (a request arrives, leaves or finishes, or the
budget changes):

* tickets are considered in arrival order;
* a ticket whose tenant already holds its limit of in-flight requests is skipped (it keeps
  its place; others behind it may go): a tenant never holds more than its limit;
* the first ticket that is not skipped and does not fit the free budget stops the scan, so
  a large request is never overtaken forever by smaller ones (no starvation);
* a request larger than the whole budget is refused at once (:class:`NeverFits`).

Waiting is bounded: a full line (``queue_max``) refuses at once and a wait longer than
``timeout_s`` gives up, both with a busy error carrying ``retry_after``. Positions and an
estimated wait are reported to each waiter when they change. The reservation is released
when the ``async with`` block ends however it ends: answer, error, cancellation, timeout.

A request that joins the engine's continuous batch comes with its shape: it is charged
what its joining adds to the batch's one shared reservation (:mod:`qwen_ui.admission.share`:
its own transient work, and the slot cache's growth when it needs more) instead of bytes
of its own; the same rules apply to that charge.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from qwen_ui.admission.errors import NeverFits, QueueFull, QueueTimeout, human_bytes
from qwen_ui.admission.estimate import RequestShape
from qwen_ui.admission.metrics import AdmissionMetrics
from qwen_ui.admission.share import BatchShare

log = logging.getLogger(__name__)

Report = Callable[[int, float], None]  # (requests ahead, estimated wait in seconds)
TenantLimit = Callable[[str], int]
INITIAL_HOLD_S = 5.0  # assumed time a request holds its reservation, until one is measured
HOLD_SMOOTHING = 0.2


def _no_report(ahead: int, wait_s: float) -> None:
    return None


def unlimited(tenant: str) -> int:
    return 1_000_000


def _future() -> asyncio.Future[None]:
    return asyncio.get_running_loop().create_future()


@dataclass
class Ticket:
    tenant: str
    nbytes: int
    seq: int
    arrived: float
    report: Report
    granted: asyncio.Future[None] = field(default_factory=_future)
    admitted: float = 0.0
    last_ahead: int = -1
    shape: RequestShape | None = None  # joins the batch's shared reservation
    pool: BatchShare | None = None  # the share it joins (its model's batch)
    share: BatchShare | None = None  # the share it joined, once admitted
    charged: int = 0  # bytes added to the budget's use when admitted


@dataclass(frozen=True)
class Grant:
    """What the holder of a reservation gets: its size and how long it waited."""

    tenant: str
    nbytes: int
    waited_s: float


@dataclass(frozen=True)
class Snapshot:
    budget: int
    in_use: int
    max_in_use: int
    waiting: int
    inflight: dict[str, int]


class AdmissionController:
    def __init__(
        self,
        budget: int,
        *,
        queue_max: int,
        timeout_s: float,
        tenant_limit: TenantLimit = unlimited,
        metrics: AdmissionMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.queue_max = queue_max
        self.timeout_s = timeout_s
        self.tenant_limit = tenant_limit
        self.metrics = metrics or AdmissionMetrics()
        self.clock = clock
        self._budget = 0
        self._in_use = 0
        self.max_in_use = 0
        self.max_inflight: dict[str, int] = {}  # per tenant, since start
        self._inflight: dict[str, int] = {}
        self._waiting: list[Ticket] = []
        self._seq = itertools.count()
        self._hold_s = INITIAL_HOLD_S
        self.share: BatchShare | None = None
        self.set_budget(budget)

    # --- state ----------------------------------------------------------------------
    @property
    def budget(self) -> int:
        return self._budget

    @property
    def in_use(self) -> int:
        return self._in_use

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def inflight(self, tenant: str) -> int:
        return self._inflight.get(tenant, 0)

    def snapshot(self) -> Snapshot:
        return Snapshot(
            self._budget, self._in_use, self.max_in_use, len(self._waiting), dict(self._inflight)
        )

    def set_budget(self, budget: int) -> None:
        self._budget = max(0, int(budget))
        self.metrics.budget.set(self._budget)
        self._pump()

    def use_share(self, share: BatchShare | None) -> None:
        """Requests reserved with a shape join ``share`` from now on (None: each reserves
        its own bytes)."""
        self.share = share
        self._pump()

    def fits_alone(self, nbytes: int) -> bool:
        return nbytes <= self._budget

    def estimated_wait(self, ahead: int) -> float:
        """Seconds until a request with ``ahead`` requests before it is likely admitted."""
        running = max(1, sum(self._inflight.values()))
        return round(self._hold_s * (ahead + 1) / running, 1)

    # --- the reservation ------------------------------------------------------------
    @asynccontextmanager
    async def reserve(
        self,
        tenant: str,
        nbytes: int,
        report: Report | None = None,
        shape: RequestShape | None = None,
        share: BatchShare | None = None,
    ) -> AsyncIterator[Grant]:
        """Hold ``nbytes`` for ``tenant`` for the duration of the block; with ``shape``
        (and a batch share in use), the request's part of the batch's shared reservation
        instead (``nbytes``: what it needs alone). ``share``: the batch it joins (each
        served model has its own); None, the controller's (:meth:`use_share`)."""
        ticket = self._ticket(tenant, nbytes, report or _no_report, shape, share or self.share)
        await self._acquire(ticket)
        grant = Grant(tenant, nbytes, self.clock() - ticket.arrived)
        try:
            yield grant
        finally:
            self._release(ticket)

    def _ticket(
        self,
        tenant: str,
        nbytes: int,
        report: Report,
        shape: RequestShape | None,
        pool: BatchShare | None,
    ) -> Ticket:
        if nbytes > self._budget:
            self.metrics.refusals.labels("never_fits").inc()
            raise NeverFits(needed=human_bytes(nbytes), budget=human_bytes(self._budget))
        ticket = Ticket(
            tenant, nbytes, next(self._seq), self.clock(), report, shape=shape, pool=pool
        )
        if len(self._waiting) >= self.queue_max and not self._would_admit_now(ticket):
            self.metrics.refusals.labels("queue_full").inc()
            wait = max(1.0, self.estimated_wait(len(self._waiting)))
            raise QueueFull(retry_after=wait, waiting=len(self._waiting), seconds=round(wait))
        return ticket

    def _would_admit_now(self, ticket: Ticket) -> bool:
        """True when a new ticket would pass every waiter (none are eligible ahead of it)."""
        return not self._waiting and self._eligible(ticket)

    async def _acquire(self, ticket: Ticket) -> None:
        self._waiting.append(ticket)
        self.metrics.queue.set(len(self._waiting))
        self._pump()  # admits it now if it may go, else reports its place
        try:
            async with asyncio.timeout(self.timeout_s):
                await asyncio.shield(ticket.granted)
        except TimeoutError:
            if ticket.granted.done():  # admitted in the same instant: keep it
                return self._observe(ticket)
            self._leave(ticket)
            self.metrics.refusals.labels("timeout").inc()
            wait = max(1.0, self.estimated_wait(len(self._waiting)))
            raise QueueTimeout(
                retry_after=wait, waited=round(self.timeout_s), seconds=round(wait)
            ) from None
        except BaseException:  # cancelled (client gone) while waiting or just admitted
            if ticket.granted.done():
                self._release(ticket)
            else:
                self._leave(ticket)
            raise
        self._observe(ticket)

    def _observe(self, ticket: Ticket) -> None:
        self.metrics.wait.observe(self.clock() - ticket.arrived)

    def _leave(self, ticket: Ticket) -> None:
        if ticket in self._waiting:
            self._waiting.remove(ticket)
            self.metrics.queue.set(len(self._waiting))
        ticket.granted.cancel()
        self._pump()

    def _release(self, ticket: Ticket) -> None:
        if ticket.share is not None:
            self._in_use -= ticket.share.leave(ticket.seq)
        else:
            self._in_use -= ticket.charged
        left = self._inflight.get(ticket.tenant, 0) - 1
        if left > 0:
            self._inflight[ticket.tenant] = left
        else:
            self._inflight.pop(ticket.tenant, None)
        held = self.clock() - ticket.admitted
        self._hold_s = (1 - HOLD_SMOOTHING) * self._hold_s + HOLD_SMOOTHING * max(0.0, held)
        self.metrics.in_use.set(self._in_use)
        self._pump()

    # --- moving the line ------------------------------------------------------------
    def _eligible(self, ticket: Ticket) -> bool:
        below_limit = self._inflight.get(ticket.tenant, 0) < self.tenant_limit(ticket.tenant)
        return below_limit and self._cost(ticket) <= self._budget - self._in_use

    def _pump(self) -> None:
        admitted = False
        limits: dict[str, int] = {}  # one look-up per tenant and pass (the tenants file)
        for ticket in list(self._waiting):
            if ticket.tenant not in limits:
                limits[ticket.tenant] = self.tenant_limit(ticket.tenant)
            if self._inflight.get(ticket.tenant, 0) >= limits[ticket.tenant]:
                continue  # the tenant is at its limit: keep the place, let others pass
            if self._cost(ticket) > self._budget - self._in_use:
                break  # head of line for bytes: nobody overtakes a request that waits for room
            self._admit(ticket)
            admitted = True
        if admitted or self._waiting:
            self._report_all()

    def _cost(self, ticket: Ticket) -> int:
        """What admitting ``ticket`` now adds to the budget's use."""
        if ticket.shape is not None and ticket.pool is not None:
            return ticket.pool.growth(ticket.shape)
        return ticket.nbytes

    def _admit(self, ticket: Ticket) -> None:
        self._waiting.remove(ticket)
        if ticket.shape is not None and ticket.pool is not None:
            ticket.share = ticket.pool
            ticket.charged = ticket.pool.join(ticket.seq, ticket.shape)
        else:
            ticket.charged = ticket.nbytes
        self._in_use += ticket.charged
        self.max_in_use = max(self.max_in_use, self._in_use)
        count = self._inflight[ticket.tenant] = self._inflight.get(ticket.tenant, 0) + 1
        self.max_inflight[ticket.tenant] = max(self.max_inflight.get(ticket.tenant, 0), count)
        ticket.admitted = self.clock()
        self.metrics.in_use.set(self._in_use)
        self.metrics.queue.set(len(self._waiting))
        if not ticket.granted.done():
            ticket.granted.set_result(None)

    def _report_all(self) -> None:
        for ticket in self._waiting:
            self._report(ticket)

    def _report(self, ticket: Ticket) -> None:
        ahead = self._waiting.index(ticket)
        if ahead == ticket.last_ahead:
            return
        ticket.last_ahead = ahead
        try:
            ticket.report(ahead, self.estimated_wait(ahead))
        except Exception:  # a reporter must never break the line
            log.exception("queue position report failed")
