"""Per-tenant limits from the tenants file: questions per day and concurrent requests.

Questions per day are counted in the state store (shared by replicas; the day is UTC).
Concurrent requests are counted in this process: with several replicas each one allows
``concurrent_requests`` per tenant. The engine wraps each question in::

    async with auth.quotas.question(principal):
        ...
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from qwen_ui.auth.clock import Clock
from qwen_ui.auth.errors import QuotaExceeded, TenantBusy
from qwen_ui.auth.principal import Principal
from qwen_ui.auth.tenants import Limits, TenantRegistry
from qwen_ui.errors import Unauthorized
from qwen_ui.state import Namespaced

DAY_S = 86400


@dataclass
class TenantQuotas:
    store: Namespaced
    registry: TenantRegistry
    clock: Clock
    _running: dict[str, int] = field(default_factory=dict)

    def _limits(self, principal: Principal) -> Limits:
        tenant = self.registry.get(principal.tenant)
        if tenant is None:
            raise Unauthorized()
        return tenant.limits

    async def count_question(self, principal: Principal) -> int:
        """Count one question for today; raise QuotaExceeded past the daily limit."""
        limits = self._limits(principal)
        now = self.clock()
        day = datetime.fromtimestamp(now, UTC).strftime("%Y%m%d")
        count = await self.store.incr(f"day:{principal.tenant}:{day}", ttl=2 * DAY_S)
        if limits.questions_per_day and count > limits.questions_per_day:
            until_midnight = DAY_S - now % DAY_S
            raise QuotaExceeded(
                retry_after=math.ceil(until_midnight), limit=limits.questions_per_day
            )
        return count

    @asynccontextmanager
    async def question(self, principal: Principal) -> AsyncIterator[None]:
        """Hold one of the tenant's concurrent slots and count the question for today."""
        limits = self._limits(principal)
        running = self._running.get(principal.tenant, 0)
        if running >= limits.concurrent_requests:
            raise TenantBusy(retry_after=5, limit=limits.concurrent_requests)
        self._running[principal.tenant] = running + 1
        try:
            await self.count_question(principal)
            yield
        finally:
            left = self._running[principal.tenant] - 1
            if left:
                self._running[principal.tenant] = left
            else:
                del self._running[principal.tenant]
