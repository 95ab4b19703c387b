"""Failed-login throttling: a slot is reserved before any credential is tried (and before OSS).

Failures are counted per client IP and per (tenant, user or key id, IP). Every attempt
first takes a slot in both counters with one atomic increment (memory or Redis) and is
judged on the count that increment returned, so N parallel guesses cannot all pass a
check made before any of them failed: at most the limit reach the verifier and the rest
get :class:`LoginThrottled` (429 with Retry-After). A failed attempt keeps its slot (it
is the recorded failure); a right password releases the address's slot and clears that
user's counter; an attempt that ends otherwise (OSS unreachable, the state store down)
gives its slots back. Once a counter reaches its limit, a failure locks it for
``backoff * 2**k`` seconds (capped); past the limit only one attempt at a time passes,
the first after the lock ran out. Because the per-user counter includes the IP, an
attacker at one address cannot lock out the real user at another; the per-IP limit is
higher, so one office behind NAT is not locked by one person's typos. Lock deadlines are
stored as values and judged on the injected clock; the store's TTL only collects garbage.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from qwen_ui.auth.clock import Clock
from qwen_ui.auth.errors import LoginThrottled
from qwen_ui.auth.keys import ServerKeys
from qwen_ui.state import Namespaced

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ThrottlePolicy:
    max_failures: int
    max_failures_per_ip: int
    backoff_s: float
    backoff_max_s: float
    window_s: float


@dataclass(frozen=True)
class Counter:
    kind: str  # "address" or "user" (for log lines; never the user's name)
    name: str
    limit: int


@dataclass(frozen=True)
class Reservation:
    """The slots one login attempt holds: the count each counter's increment returned."""

    counters: tuple[Counter, ...]
    counts: tuple[int, ...]


def throttled(wait: float) -> LoginThrottled:
    return LoginThrottled(retry_after=wait, seconds=math.ceil(wait))


@dataclass
class LoginThrottle:
    store: Namespaced
    keys: ServerKeys
    clock: Clock
    policy: ThrottlePolicy

    def _counters(self, ip: str, ident: str) -> tuple[Counter, Counter]:
        who = self.keys.mac("throttle", ident, ip)
        return (
            Counter("address", f"ip:{ip}", self.policy.max_failures_per_ip),
            Counter("user", f"id:{who}", self.policy.max_failures),
        )

    async def check(self, ip: str, ident: str) -> None:
        """Raise :class:`LoginThrottled` while either counter is locked."""
        await self._check_locks(self._counters(ip, ident))

    async def _check_locks(self, counters: tuple[Counter, ...]) -> None:
        now = self.clock()
        waits = []
        for counter in counters:
            raw = await self.store.get(f"lock:{counter.name}")
            if raw is not None and float(raw) > now:
                waits.append(float(raw) - now)
                log.debug("login throttled: %s counter locked", counter.kind)
        if waits:
            raise throttled(max(waits))

    async def reserve(self, ip: str, ident: str) -> Reservation:
        """Take a slot in both counters before the verifier runs, or raise LoginThrottled."""
        counters = self._counters(ip, ident)
        await self._check_locks(counters)
        counts: list[int] = []
        try:
            for counter in counters:
                counts.append(await self.store.incr(f"n:{counter.name}", self.policy.window_s))
                if counts[-1] > counter.limit:
                    await self._admit_past_limit(counter)
        except LoginThrottled:
            await self._give_back(counters[: len(counts)])
            raise
        log.debug("login slot reserved: address %d/%d, user %d/%d", *_pairs(counters, counts))
        return Reservation(counters, tuple(counts))

    async def _admit_past_limit(self, counter: Counter) -> None:
        """Past the limit, one attempt per lock: the first once that lock has run out."""
        raw = await self.store.get(f"lock:{counter.name}")
        if raw is None:  # the attempts within the limit are still being verified
            log.debug("login throttled: %s limit reached by attempts in flight", counter.kind)
            raise throttled(self.policy.backoff_s)
        wait = float(raw) - self.clock()
        if wait > 0:
            raise throttled(wait)
        turn = await self.store.incr(f"turn:{counter.name}:{raw.decode()}", self.policy.window_s)
        if turn != 1:
            log.debug("login throttled: %s retry after the lock already taken", counter.kind)
            raise throttled(self.policy.backoff_s)

    async def _give_back(self, counters: tuple[Counter, ...]) -> None:
        for counter in counters:
            await self.store.decr(f"n:{counter.name}")

    async def failed(self, reservation: Reservation) -> None:
        """The attempt's slots stay as its failures; the counters at their limit lock."""
        for counter, count in zip(reservation.counters, reservation.counts, strict=True):
            if count >= counter.limit:
                await self._lock(counter, count - counter.limit)

    async def _lock(self, counter: Counter, excess: int) -> None:
        seconds = min(self.policy.backoff_s * 2 ** min(excess, 30), self.policy.backoff_max_s)
        until = self.clock() + seconds
        ttl = max(seconds, self.policy.window_s)
        await self.store.set(f"lock:{counter.name}", repr(until).encode(), ttl=ttl)
        log.debug("login throttle: %s counter locked for %.1f s", counter.kind, seconds)

    async def release(self, reservation: Reservation) -> None:
        """Neither success nor failure (OSS down, say): give both slots back."""
        await self._give_back(reservation.counters)

    async def succeeded(self, reservation: Reservation) -> None:
        """A right password releases the address's slot and clears that user's counter at
        that address (not the address's earlier failures)."""
        address, user = reservation.counters
        await self.store.decr(f"n:{address.name}")
        await self.store.delete(f"n:{user.name}")
        await self.store.delete(f"lock:{user.name}")


def _pairs(counters: tuple[Counter, ...], counts: list[int]) -> list[int]:
    return [
        n for counter, count in zip(counters, counts, strict=True) for n in (count, counter.limit)
    ]
