"""Admission by count, for engines whose memory is not ours (a remote model server): at
most ``limit`` questions at once, and at most the tenants file's ``concurrent_requests``
of one tenant; the rest wait in line up to ``queue_max`` of them, each for at most
``timeout_s``.

It is the VRAM controller's line with every request weighing one unit and a budget of
``limit`` units, so the rules are the same: arrival order, a tenant at its limit keeps
its place while others pass, the same busy errors (``queue_full``, ``queue_timeout``
with ``retry_after``), and a slot released on every exit path, cancellation included."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from qwen_ui.admission.controller import AdmissionController, TenantLimit, unlimited
from qwen_ui.settings import Settings

UNIT = 1  # what one request weighs


def _no_report(ahead: int, wait_s: float = 0.0) -> None:
    return None


class CountGate:
    """Callable as the engine's admission seam: ``gate(request, images, report)``."""

    def __init__(
        self,
        limit: int,
        queue_max: int,
        timeout_s: float,
        tenant_limit: TenantLimit = unlimited,
    ) -> None:
        self.limit = limit
        self.controller = AdmissionController(
            limit * UNIT, queue_max=queue_max, timeout_s=timeout_s, tenant_limit=tenant_limit
        )

    @classmethod
    def from_settings(cls, settings: Settings, tenant_limit: TenantLimit = unlimited) -> CountGate:
        """The remote engine's gate: ``remote_max_concurrency`` at once, the usual line."""
        return cls(
            settings.remote_max_concurrency,
            settings.queue_max,
            settings.queue_timeout_s,
            tenant_limit,
        )

    @property
    def active(self) -> int:
        return self.controller.in_use // UNIT

    @property
    def waiting(self) -> int:
        return self.controller.waiting

    def inflight(self, tenant: str) -> int:
        return self.controller.inflight(tenant)

    def __call__(
        self, request: Any, images: Sequence[Any], report: Callable[..., None]
    ) -> AbstractAsyncContextManager[None]:
        return self.slot(str(request.tenant), report)

    @asynccontextmanager
    async def slot(
        self, tenant: str = "", report: Callable[..., None] | None = None
    ) -> AsyncIterator[None]:
        """Hold one slot for ``tenant`` for the block (waiting in line, reporting)."""
        async with self.controller.reserve(tenant, UNIT, report or _no_report):
            yield
