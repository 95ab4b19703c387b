"""The engine's admission seam, on plain data only.

The engine tells admission its model's facts once per snapshot (:meth:`use`) and the
weights' resident bytes once they are loaded and measured (:meth:`loaded`); for each
request it hands over the request's shape (:meth:`fit`: sized once, refused at once when
it can never fit, or given smaller sizes for its new images when the settings allow) and
then holds the fitted bytes from the controller around the GPU work (:meth:`reserve`).
Nothing here reads the engine's conversations, pipelines or worker.
"""

from __future__ import annotations

import logging
from contextlib import AbstractAsyncContextManager
from dataclasses import replace

from qwen_ui.admission import budget as budgets
from qwen_ui.admission.controller import (
    AdmissionController,
    Grant,
    Report,
    TenantLimit,
    unlimited,
)
from qwen_ui.admission.errors import ImagesNeverFit, NeverFits, human_bytes
from qwen_ui.admission.estimate import RequestShape
from qwen_ui.admission.metrics import AdmissionMetrics
from qwen_ui.admission.share import BatchShare
from qwen_ui.admission.sizing import (
    Sized,
    downscaled_size,
    largest_fitting_max_pixels,
    size_request,
)
from qwen_ui.engine.shapes import AskShape, Fit, ModelFacts, Placement
from qwen_ui.settings import Settings

log = logging.getLogger(__name__)


class EngineAdmission:
    def __init__(
        self, settings: Settings, controller: AdmissionController, placement: Placement
    ) -> None:
        self.settings = settings
        self.controller = controller
        self.placement = placement
        self._facts: ModelFacts | None = None
        self._resident: int | None = None
        self.share: BatchShare | None = None  # this model's continuous batch, shared

    # --- what the engine tells -------------------------------------------------------
    def use(self, facts: ModelFacts) -> None:
        """The served model's facts (once per snapshot): they set the budget."""
        if self._facts != facts:
            self._facts = facts
            batching = facts.shape.batch_limit > 0
            self.share = BatchShare(facts.shape) if batching else None
            self.controller.use_share(self.share)
            self._update_budget()

    def loaded(self, resident_bytes: int) -> None:
        """The weights' bytes measured on the device once loaded: the budget is corrected."""
        if self.placement.device != "cuda" or resident_bytes == self._resident:
            return
        self._resident = resident_bytes
        log.info("resident weights measured: %s", human_bytes(resident_bytes))
        self._update_budget()

    # --- the seam ---------------------------------------------------------------------
    async def fit(self, ask: AskShape) -> Fit:
        """The bytes to reserve for ``ask``, sized once; with smaller sizes for its new
        images when it could never fit and the settings allow. Refuses at once what
        cannot fit at all."""
        facts = self.facts
        sized = size_request(facts, ask)
        budget = self.controller.budget
        fits = sized.estimate.total <= budget
        if fits or not ask.new_sizes or not self.settings.downscale_to_fit:
            self._check_fits(sized)
            return Fit(sized.estimate.total, sized=sized.shape)
        max_pixels = largest_fitting_max_pixels(facts, ask, budget)
        if max_pixels is None:
            self._check_fits(sized)
        assert max_pixels is not None
        new_sizes = tuple(downscaled_size(s, facts.geometry, max_pixels) for s in ask.new_sizes)
        smaller = size_request(facts, replace(ask, new_sizes=new_sizes))  # as the engine sends
        self.controller.metrics.downscaled.inc()
        log.info("request %s: images downscaled to %d pixels", ask.request_id, max_pixels)
        return Fit(smaller.estimate.total, max_pixels, new_sizes, sized=smaller.shape)

    def reserve(self, tenant: str, fit: Fit, report: Report) -> AbstractAsyncContextManager[Grant]:
        """Hold what ``fit`` needs for ``tenant`` (waiting in line, reporting the
        position): with continuous batching, the request's part of the batch's shared
        reservation (:mod:`qwen_ui.admission.share`), else ``fit.nbytes``."""
        shape = fit.sized if isinstance(fit.sized, RequestShape) else None
        return self.controller.reserve(tenant, fit.nbytes, report, shape, self.share)

    # --- sizing -----------------------------------------------------------------------
    @property
    def facts(self) -> ModelFacts:
        if self._facts is None:
            raise RuntimeError("admission asked before the engine told the model's facts")
        return self._facts

    def size(self, ask: AskShape) -> Sized:
        """The request's memory shape and estimate with the server's geometry."""
        return size_request(self.facts, ask)

    def _check_fits(self, sized: Sized) -> None:
        if sized.estimate.total <= self.controller.budget:
            return
        self.controller.metrics.refusals.labels("never_fits").inc()
        needed, budget = human_bytes(sized.estimate.total), human_bytes(self.controller.budget)
        if not sized.new_grids:
            raise NeverFits(needed=needed, budget=budget)
        raise ImagesNeverFit(
            needed=needed, budget=budget, images=len(sized.new_grids), tokens=sized.image_tokens
        )

    # --- the budget -------------------------------------------------------------------
    def _update_budget(self) -> None:
        facts = self._facts
        weights, shape = (budgets.expected_weights(facts), facts.shape) if facts else (0, None)
        self.controller.set_budget(
            budgets.request_budget(self.settings, self.placement, self._resident, weights, shape)
        )


def build(
    settings: Settings,
    placement: Placement,
    metrics: AdmissionMetrics | None = None,
    tenant_limit: TenantLimit = unlimited,
) -> EngineAdmission:
    """The admission seam for one app: a controller with the settings' bounds."""
    controller = AdmissionController(
        budgets.request_budget(settings, placement, None, 0),
        queue_max=settings.queue_max,
        timeout_s=settings.queue_timeout_s,
        tenant_limit=tenant_limit,
        metrics=metrics,
    )
    return EngineAdmission(settings, controller, placement)
