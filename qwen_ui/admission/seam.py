"""The engine's admission seam: size the request, downscale it if allowed and needed,
then hold its estimated bytes from the controller around the GPU work.

The engine calls :meth:`EngineAdmission.fit` after decoding the images (before it looks
embeddings up, so a downscaled image gets its own cache key) and enters
``EngineAdmission(request, images, report)`` around the work. Everything the estimate
needs comes from the model's snapshot (config, processor), read once without loading the
weights; the budget on CUDA is corrected once the weights are loaded and measured.
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from PIL import Image

from qwen_ui.admission import budget as budgets
from qwen_ui.admission.controller import (
    AdmissionController,
    Grant,
    Report,
    TenantLimit,
    unlimited,
)
from qwen_ui.admission.errors import ImagesNeverFit, NeverFits, human_bytes
from qwen_ui.admission.facts import ModelFacts, load_facts
from qwen_ui.admission.metrics import AdmissionMetrics
from qwen_ui.admission.sizing import (
    PastTurn,
    Size,
    Sized,
    downscaled_size,
    largest_fitting_max_pixels,
    size_request,
)
from qwen_ui.engine.conversations import StoredTurn
from qwen_ui.engine.engine import AskRequest, Engine
from qwen_ui.engine.events import Event, Stage
from qwen_ui.engine.generate import CACHE_BUCKET
from qwen_ui.engine.images import CheckedImage
from qwen_ui.engine.pipelines import compute_dtype, pick_device
from qwen_ui.settings import Settings

log = logging.getLogger(__name__)


class EngineSource(Protocol):
    def __call__(self) -> Engine | None: ...


class EngineAdmission:
    def __init__(
        self, settings: Settings, controller: AdmissionController, engine: EngineSource
    ) -> None:
        self.settings = settings
        self.controller = controller
        self.engine = engine
        self.device = pick_device(settings.device)
        self.dtype = compute_dtype(self.device)
        self._facts: ModelFacts | None = None
        self._lock = asyncio.Lock()
        self._resident: int | None = None

    # --- the seam ---------------------------------------------------------------------
    def __call__(
        self, request: AskRequest, images: Sequence[CheckedImage], report: Report
    ) -> AbstractAsyncContextManager[Grant]:
        return self._reserve(request, images, report)

    @asynccontextmanager
    async def _reserve(
        self, request: AskRequest, images: Sequence[CheckedImage], report: Report
    ) -> AsyncIterator[Grant]:
        sized = await self.size(request, [c.size for c in images])
        self._check_fits(sized)
        async with self.controller.reserve(request.tenant, sized.estimate.total, report) as grant:
            yield grant

    async def fit(
        self, request: AskRequest, images: Sequence[CheckedImage]
    ) -> tuple[list[CheckedImage], list[Event]]:
        """The request's images, downscaled when it could never fit and the settings allow;
        plus the events that tell the user. Refuses at once what cannot fit at all."""
        sized = await self.size(request, [c.size for c in images])
        budget = self.controller.budget
        if sized.estimate.total <= budget or not images or not self.settings.downscale_to_fit:
            self._check_fits(sized)
            return list(images), []
        facts = await self.facts()
        history = await self._history(request, len(images))
        max_pixels = await asyncio.to_thread(
            largest_fitting_max_pixels,
            facts,
            request.question.strip(),
            [c.size for c in images],
            history,
            self._max_new_tokens(request),
            budget,
        )
        if max_pixels is None:
            self._check_fits(sized)
        assert max_pixels is not None
        smaller = await asyncio.to_thread(_downscale, images, facts, max_pixels)
        self.controller.metrics.downscaled.inc()
        log.info("request %s: images downscaled to %d pixels", request.request_id, max_pixels)
        return smaller, [Stage("downscaled", total=len(images), max_pixels=max_pixels)]

    # --- sizing -----------------------------------------------------------------------
    async def facts(self) -> ModelFacts:
        async with self._lock:
            if self._facts is None:
                engine = self._engine()
                snapshot = await asyncio.to_thread(engine.pipelines.snapshot)
                s = self.settings
                self._facts = await asyncio.to_thread(
                    load_facts,
                    Path(snapshot.path),
                    self.device,
                    self.dtype,
                    s.min_pixels,
                    s.max_pixels,
                    self._cache_bucket(),
                    s.prefill_dequant_rows,
                    s.fuse_projections,
                )
                self._update_budget()
            await self._measure_resident()
            return self._facts

    async def size(self, request: AskRequest, new_sizes: Sequence[Size]) -> Sized:
        facts = await self.facts()
        history = await self._history(request, len(new_sizes))
        return await asyncio.to_thread(
            size_request,
            facts,
            request.question.strip(),
            new_sizes,
            history,
            self._max_new_tokens(request),
        )

    async def estimate(self, request: AskRequest, images: Sequence[CheckedImage]) -> int:
        """DESIGN.md's ``estimate(request, model_config) -> bytes`` for the served model."""
        return (await self.size(request, [c.size for c in images])).estimate.total

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

    def _cache_bucket(self) -> int:
        return CACHE_BUCKET if budgets.decodes_static(self.settings, self.device) else 0

    def _max_new_tokens(self, request: AskRequest) -> int:
        wanted = request.options.max_new_tokens
        return self.settings.max_new_tokens if wanted is None else wanted

    async def _history(self, request: AskRequest, new_images: int) -> list[PastTurn]:
        if not request.conversation_id:
            return []
        conversations = self._engine().conversations
        conversation = await conversations.get(request.owner, request.conversation_id)
        # images attached before this question (a stopped or failed turn) join it; the
        # request's own images are already attached at the end of ``pending``
        earlier = conversation.pending[: max(0, len(conversation.pending) - new_images)]
        turns = history_window(
            conversation.turns, new_images + len(earlier), self.settings.max_images
        )
        past = []
        for turn in turns:
            sizes = [await self._image_size(request.tenant, sha) for sha in turn.images]
            past.append(PastTurn(turn.question, turn.answer, sizes))
        if earlier:
            sizes = [await self._image_size(request.tenant, sha) for sha in earlier]
            past.append(PastTurn("", "", sizes))
        return past

    async def _image_size(self, tenant: str, sha: str) -> Size:
        data = await self._engine().conversations.image(tenant, sha)
        with Image.open(io.BytesIO(data)) as image:  # the header only
            return image.size

    def _engine(self) -> Engine:
        engine = self.engine()
        if engine is None:
            raise RuntimeError("admission used before the engine started")
        return engine

    # --- the budget -------------------------------------------------------------------
    async def _measure_resident(self) -> None:
        """Once the weights are loaded, measure them on the engine's worker thread (between
        two jobs, so no request's activations are counted) and correct the budget."""
        engine = self.engine()
        if self._resident is not None or self.device.type != "cuda" or engine is None:
            return
        if not engine.pipelines.is_loaded:
            return
        job = engine.worker.submit(lambda _job: budgets.resident_bytes(self.device))
        async for _ in job.events():
            pass
        self._resident = job.result
        log.info("resident weights measured: %s", human_bytes(job.result))
        self._update_budget()

    def _update_budget(self) -> None:
        facts = self._facts
        weights, shape = (facts.weight_file_bytes, facts.shape) if facts else (0, None)
        self.controller.set_budget(
            budgets.request_budget(self.settings, self.device, self._resident, weights, shape)
        )


def history_window(
    turns: Sequence[StoredTurn], new_images: int, max_images: int
) -> list[StoredTurn]:
    """The earlier turns the engine keeps in the prompt (the latest whose images fit,
    with the new ones, in ``max_images``), as ``Engine._history_window`` chooses them."""
    room = max_images - new_images
    kept: list[StoredTurn] = []
    for turn in reversed(turns):
        if len(turn.images) > room:
            break
        room -= len(turn.images)
        kept.append(turn)
    return list(reversed(kept))


def _downscale(
    images: Sequence[CheckedImage], facts: ModelFacts, max_pixels: int
) -> list[CheckedImage]:
    out = []
    for item in images:
        width, height = downscaled_size(item.size, facts.geometry, max_pixels)
        if (width, height) == item.size:
            out.append(item)
            continue
        image = item.image.resize((width, height), Image.Resampling.BICUBIC)
        # a new identity, so the smaller image's embedding gets its own cache entry
        sha = f"{item.sha256}-max{max_pixels}"
        out.append(replace(item, pixels=image, size=image.size, sha256=sha))
    return out


def build(
    settings: Settings,
    engine: EngineSource,
    metrics: AdmissionMetrics | None = None,
    tenant_limit: TenantLimit = unlimited,
) -> EngineAdmission:
    """The admission seam for one app: a controller with the settings' bounds."""
    controller = AdmissionController(
        budgets.request_budget(settings, pick_device(settings.device), None, 0),
        queue_max=settings.queue_max,
        timeout_s=settings.queue_timeout_s,
        tenant_limit=tenant_limit,
        metrics=metrics,
    )
    return EngineAdmission(settings, controller, engine)
