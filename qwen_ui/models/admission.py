"""One served model's admission: its own facts size its requests; the line and the budget
are shared by every model (the ledger sets the budget from all loaded weights)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from qwen_ui.admission.controller import AdmissionController, Grant, Report
from qwen_ui.admission.seam import EngineAdmission
from qwen_ui.engine.shapes import Fit, Placement
from qwen_ui.models.memory import WeightLedger
from qwen_ui.settings import Settings


class ModelAdmission(EngineAdmission):
    """The engine's admission seam for one model of several."""

    def __init__(
        self,
        settings: Settings,
        controller: AdmissionController,
        where: Placement,
        ledger: WeightLedger,
        key: int,
        room: Callable[[int, Report], Awaitable[None]],
    ) -> None:
        super().__init__(settings, controller, where)
        self.ledger = ledger
        self.key = key
        self.room = room

    def reserve(self, tenant: str, fit: Fit, report: Report) -> AbstractAsyncContextManager[Grant]:
        """Room for the model's weights first (the registry may unload idle models or
        wait for busy ones), then the request's place in the shared line."""
        return self._reserve(tenant, fit, report)

    @asynccontextmanager
    async def _reserve(self, tenant: str, fit: Fit, report: Report) -> AsyncIterator[Grant]:
        await self.room(self.key, report)
        async with super().reserve(tenant, fit, report) as grant:
            yield grant

    def _update_budget(self) -> None:
        """The model's facts or measured weights changed: the ledger recomputes the budget
        of the shared line (never from this model alone)."""
        self.ledger.observed(self.key, self._facts, self._resident)
