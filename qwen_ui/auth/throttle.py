"""Failed-login throttling, checked before any credential is tried (and before OSS).

Failures are counted per client IP and per (tenant, user or key id, IP). Once a counter
reaches its limit every further failure locks that counter for ``backoff * 2**k`` seconds
(capped). Because the per-user counter includes the IP, an attacker at one address
cannot lock out the real user at another; the per-IP limit is higher, so one office
behind NAT is not locked by one person's typos. Only :class:`InvalidCredentials` counts:
OSS being unreachable is not a failure. Lock deadlines are stored as values and judged
on the injected clock; the store's TTL only collects garbage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from qwen_ui.auth.clock import Clock
from qwen_ui.auth.errors import LoginThrottled
from qwen_ui.auth.keys import ServerKeys
from qwen_ui.state import Namespaced


@dataclass(frozen=True)
class ThrottlePolicy:
    max_failures: int
    max_failures_per_ip: int
    backoff_s: float
    backoff_max_s: float
    window_s: float


@dataclass
class LoginThrottle:
    store: Namespaced
    keys: ServerKeys
    clock: Clock
    policy: ThrottlePolicy

    def _counters(self, ip: str, ident: str) -> list[tuple[str, int]]:
        who = self.keys.mac("throttle", ident, ip)
        return [
            (f"ip:{ip}", self.policy.max_failures_per_ip),
            (f"id:{who}", self.policy.max_failures),
        ]

    async def check(self, ip: str, ident: str) -> None:
        """Raise :class:`LoginThrottled` while either counter is locked."""
        now = self.clock()
        waits = []
        for name, _limit in self._counters(ip, ident):
            raw = await self.store.get(f"lock:{name}")
            if raw is not None and float(raw) > now:
                waits.append(float(raw) - now)
        if waits:
            wait = max(waits)
            raise LoginThrottled(retry_after=wait, seconds=math.ceil(wait))

    async def failed(self, ip: str, ident: str) -> None:
        for name, limit in self._counters(ip, ident):
            count = await self.store.incr(f"n:{name}", ttl=self.policy.window_s)
            if count >= limit:
                await self._lock(name, count - limit)

    async def _lock(self, name: str, excess: int) -> None:
        seconds = min(self.policy.backoff_s * 2 ** min(excess, 30), self.policy.backoff_max_s)
        until = self.clock() + seconds
        ttl = max(seconds, self.policy.window_s)
        await self.store.set(f"lock:{name}", repr(until).encode(), ttl=ttl)

    async def succeeded(self, ip: str, ident: str) -> None:
        """A right password clears that user's counter at that address (not the IP's)."""
        _ip_counter, (name, _limit) = self._counters(ip, ident)
        await self.store.delete(f"n:{name}")
        await self.store.delete(f"lock:{name}")
