"""``Engine.ask(request) -> AsyncIterator[Event]``: images in, stage events and tokens out.

The asyncio side checks the input, reads the conversation once, decodes images (in
threads), computes the request's shape once (:class:`~qwen_ui.engine.shapes.AskShape`:
text tokens, the sizes of the earlier and the new images) and hands it to admission as
plain data, looks embeddings up in the cache and holds admission's reservation around
the work; the worker thread loads the model when needed, encodes cache misses, builds the
prompt and generates. Admission never calls back into the engine: it is told the model's
facts (once per snapshot) and the weights' resident bytes (once loaded). Closing the
iterator (a client that went away) cancels the job: the worker stops within one decoding
step and drops the request's KV cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

import torch
from PIL import Image
from transformers import PreTrainedModel

from qwen_ui.engine import images as image_checks
from qwen_ui.engine.answering import (
    Answering,
    Encoded,
    Entrant,
    Plan,
    PromptImage,
    WorkResult,
    prepare,
)
from qwen_ui.engine.batching import Arrivals, Batch
from qwen_ui.engine.batching import Sequence as BatchSequence
from qwen_ui.engine.box_mapping import (
    Box,
    PromptImages,
    SeenImage,
    find_boxes,
    images_of,
    locate_seen,
)
from qwen_ui.engine.cache import CacheKey, Embedding, EmbeddingCache
from qwen_ui.engine.conversations import (
    Conversation,
    ConversationStore,
    StoredTurn,
    new_id,
    owner_of,
)
from qwen_ui.engine.errors import (
    SEED_MAX,
    AnswerFailed,
    BadOption,
    ConversationNotFound,
    NoImage,
    NoQuestion,
    QuestionTooLong,
)
from qwen_ui.engine.events import Done, Event, Failed, Stage
from qwen_ui.engine.facts import Declared, ServedModel, placement, read_declared, read_model
from qwen_ui.engine.fastpath import fast_path
from qwen_ui.engine.generate import (
    CachePool,
    Generation,
    Outcome,
    Prompt,
    SamplingOptions,
    batched_step,
    compiled_step,
    decode_mode_for,
    run,
)
from qwen_ui.engine.metrics import EngineMetrics
from qwen_ui.engine.pipelines import ModelSpec, Pipelines, StoreLike, Turn
from qwen_ui.engine.prefill_graphs import PrefillGraphs
from qwen_ui.engine.shapes import AskShape, Fit, ModelFacts, Size
from qwen_ui.engine.status import EngineStatus
from qwen_ui.engine.worker import Job, Worker
from qwen_ui.errors import QwenUIError
from qwen_ui.settings import Settings
from qwen_ui.state import State

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AskOptions:
    """Per-request generation options; None takes the server default."""

    max_new_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None


@dataclass(frozen=True)
class PastTurn:
    """An earlier turn a stateless caller sends along (OpenAI-style messages)."""

    question: str
    answer: str
    images: Sequence[bytes] = ()


@dataclass(frozen=True)
class AskRequest:
    """``history`` set (even empty) makes the request stateless: the conversation is those
    turns, nothing is stored, and ``Done.conversation_id`` is empty."""

    tenant: str
    question: str
    images: Sequence[bytes] = ()
    conversation_id: str | None = None
    options: AskOptions = AskOptions()
    lang: str = "en"
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    history: Sequence[PastTurn] | None = None
    user: str = ""  # with the tenant, the principal a conversation belongs to

    @property
    def owner(self) -> str:
        return owner_of(self.tenant, self.user)


class QueueReport(Protocol):
    """Called by admission with the requests ahead and the estimated wait (0: unknown)."""

    def __call__(self, ahead: int, wait_s: float = 0.0) -> None: ...


class Admission(Protocol):
    """What the engine needs of admission (``qwen_ui.admission.seam.EngineAdmission``):
    plain data in, a reservation out; it never calls back into the engine."""

    def use(self, facts: ModelFacts) -> None:
        """The served model's facts, once per snapshot."""

    def loaded(self, resident_bytes: int) -> None:
        """The device bytes resident once the weights are loaded (CUDA)."""

    async def fit(self, ask: AskShape) -> Fit:
        """The bytes to reserve (and smaller sizes for the new images, if needed)."""
        ...

    def reserve(
        self, tenant: str, fit: Fit, report: QueueReport
    ) -> AbstractAsyncContextManager[Any]:
        """Hold what ``fit`` says for ``tenant`` around the GPU work (reporting the queue)."""
        ...


@dataclass(frozen=True)
class History:
    """The earlier turns the prompt keeps, and their images' bytes when already read."""

    turns: list[StoredTurn]
    images: dict[str, bytes]
    earlier: list[str] = field(default_factory=list)  # attached since the last answer


def sampling_for(s: Settings, options: AskOptions) -> SamplingOptions:
    """The request's sampling options, server defaults filled in and bounds checked."""
    limit = s.max_new_tokens_limit
    max_new = s.max_new_tokens if options.max_new_tokens is None else options.max_new_tokens
    temperature = s.temperature if options.temperature is None else options.temperature
    top_p = s.top_p if options.top_p is None else options.top_p
    if not 1 <= max_new <= limit:
        raise BadOption(name="max_new_tokens", low=1, high=limit)
    if not 0.0 <= temperature <= 2.0:
        raise BadOption(name="temperature", low=0, high=2)
    if not 0.0 < top_p <= 1.0:
        raise BadOption(name="top_p", low=0, high=1)
    if options.seed is not None and not 0 <= options.seed <= SEED_MAX:
        raise BadOption(name="seed", low=0, high=SEED_MAX)
    return SamplingOptions(max_new, temperature, top_p, options.seed)


def checked_question(settings: Settings, question: str) -> str:
    text = question.strip()
    if not text:
        raise NoQuestion()
    if len(text) > settings.max_question_chars:
        raise QuestionTooLong(count=len(text), limit=settings.max_question_chars)
    return text


def recent_turns(turns: list[StoredTurn], new_images: int, max_images: int) -> list[StoredTurn]:
    """The latest earlier turns whose images fit, with the new ones, in ``max_images``."""
    budget = max_images - new_images
    kept: list[StoredTurn] = []
    for turn in reversed(turns):
        if len(turn.images) > budget:
            break
        budget -= len(turn.images)
        kept.append(turn)
    return list(reversed(kept))


async def conversation_of(store: ConversationStore, request: AskRequest) -> Conversation:
    """The request's conversation: the turns a stateless request carries, the stored one
    it names (its owner's only), or a new one."""
    if request.history is not None:
        turns = [
            StoredTurn(t.question, t.answer, [sha256(b) for b in t.images]) for t in request.history
        ]
        return Conversation("", request.tenant, request.owner, turns)
    if request.conversation_id:
        return await store.get(request.owner, request.conversation_id)
    return Conversation(new_id(), request.tenant, request.owner)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Engine:
    def __init__(
        self,
        settings: Settings,
        store: StoreLike,
        state: State,
        status: EngineStatus | None = None,
        metrics: EngineMetrics | None = None,
        admission: Admission | None = None,
    ) -> None:
        self.settings = settings
        self.status = status or EngineStatus()
        self.placement = placement(settings)
        spec = ModelSpec(
            settings.model_id,
            settings.model_revision,
            settings.device,
            settings.min_pixels,
            settings.max_pixels,
            settings.prefill_dequant_rows,
            settings.vision_attention,
            settings.fuse_projections,
            self.placement.dense_limit,
            self.placement.triton_int4,
        )
        self.pipelines = Pipelines(store, spec, self.status)
        self.cache = EmbeddingCache(settings.embed_cache_bytes, state, settings.embed_cache_ttl_s)
        self.conversations = ConversationStore(
            state, settings.conversation_ttl_s, settings.conversations_per_user
        )
        self.metrics = metrics or EngineMetrics()
        self.admission = admission
        self._declared: dict[str, Declared] = {}  # per snapshot id: its qwen_ui.json
        self.fast_path = fast_path(settings, self.placement.device)  # 'auto' resolved
        self._served: ServedModel | None = None
        self._served_lock = asyncio.Lock()
        self._resident_told = False
        self.limits = image_checks.ImageLimits(
            settings.max_image_bytes, settings.max_images, settings.max_image_pixels
        )
        self.batch: Batch[Entrant] | None = None
        self.arrivals = Arrivals()
        if settings.max_batch > 1:  # continuous batching; else one request at a time
            self.batch = Batch(
                settings.max_batch,
                self._prepare,
                lambda: self.pipelines.language().model,
                settings.static_cache_pool_bytes,
                graphs=self.fast_path.compile_decode,
                prefill_tokens=settings.batch_prefill_tokens,
                compile_step=batched_step if self.fast_path.compile_decode else None,
                arrivals=self.arrivals,
                join_wait_s=settings.batch_join_wait_ms / 1000,
                lone_prefill=self._lone_prefill if self.fast_path.prefill_graph_rows else None,
            )
        self.worker = Worker(stepper=self.batch)
        self._decoder: Decoder | None = None
        self._lone_graphs: PrefillGraphs | None = None
        image_checks.raise_pil_guard(settings.max_image_pixels)

    # --- life cycle --------------------------------------------------------------------
    def start(self) -> None:
        self.worker.start()

    async def preload(self) -> None:
        """Load both pipelines now (:func:`qwen_ui.engine.warmup.start_up` calls this at
        start-up, then warms up); failures land in the status."""
        job = self.worker.submit(lambda _job: self.pipelines.load())
        try:
            async for _ in job.events():
                pass
        except QwenUIError as exc:
            log.error("preload failed: %s", exc.message("en"))

    async def close(self) -> None:
        await asyncio.to_thread(self.worker.stop)

    # --- the one call ------------------------------------------------------------------
    async def ask(self, request: AskRequest) -> AsyncGenerator[Event, None]:
        """Stage events, token deltas, then ``Done`` or ``Failed``; never raises a
        QwenUIError (it becomes ``Failed``). Closing the iterator cancels the work."""
        with self.arrivals.expected() as landed:
            async with contextlib.aclosing(self._ask(request, landed)) as events:
                async for event in events:
                    yield event

    async def _ask(
        self, request: AskRequest, landed: Callable[[], None]
    ) -> AsyncGenerator[Event, None]:
        """:meth:`ask`; ``landed()`` once the request reached the worker, or waits in line
        for admission (it is no longer on its way to the batch)."""
        job: Job[WorkResult] | None = None
        outcome = "failed"
        kept: str | None = None  # the conversation id, once it holds the new images
        try:
            start = time.perf_counter()
            sampling = self._sampling(request.options)
            question = self._question(request.question)
            conversation = await self._conversation(request)
            checked: list[image_checks.CheckedImage] = []
            async for event in self._decode(request.images, checked, conversation):
                yield event
            stateless = request.history is not None  # earlier turns come with the request
            blobs = dict(zip((c.sha256 for c in checked), request.images, strict=True))
            if checked and not stateless:  # the images belong to the conversation from now on
                await self.conversations.attach(conversation, blobs)
                kept = conversation.id
            if not question:
                raise NoQuestion()
            declared = await self._declared_facts()
            if not checked and not conversation.images and not declared.answers_without_images:
                raise NoImage()
            history = await self._history(request, conversation, len(checked))
            total = len(conversation.images) + (len(checked) if stateless else 0)
            new = len(history.earlier) + len(checked)
            turns = _turns(history, question, new, total if declared.vision_ids else 0)
            fit = await self._fit(request, turns, history, checked, sampling)
            if fit.max_pixels is not None:
                checked = await asyncio.to_thread(
                    _downscale, checked, fit.new_sizes, fit.max_pixels
                )
                yield Stage("downscaled", total=len(checked), max_pixels=fit.max_pixels)
            plan = await self._plan(request, turns, history, checked, sampling, start)
            plan = _numbered(plan, total)
            events: asyncio.Queue[Event] = asyncio.Queue()
            reservation = self._reserve(request.tenant, fit, events)
            async with EnteredAdmission(reservation, events) as waiting:
                async for event in waiting:
                    landed()  # in line: not about to join
                    yield event
                work = self._work if self.batch is None else self._join
                job = self.worker.submit(lambda j: work(j, plan))
                landed()
                async for event in job.events():
                    yield event
            result = job.result
            outcome = "cancelled" if result.outcome.finish_reason == "cancelled" else "done"
            files = {**history.images, **blobs}
            done = await self._finish(request, conversation, checked, plan, result, files)
            yield done
        except QwenUIError as exc:
            log.info("request %s failed: %s", request.request_id, exc.code)
            yield replace(Failed.of(exc, request.lang), conversation_id=kept)
        except (asyncio.CancelledError, GeneratorExit):
            outcome = "cancelled"
            raise
        except Exception:
            log.exception("request %s failed", request.request_id)
            yield Failed.of(AnswerFailed(), request.lang)
        finally:
            if job is not None:
                job.cancel()
            self.metrics.requests.labels(outcome).inc()

    # --- asyncio-side steps -------------------------------------------------------------
    def _sampling(self, options: AskOptions) -> SamplingOptions:
        return sampling_for(self.settings, options)

    def _question(self, question: str) -> str:
        """The question, stripped; empty is refused later, once images are attached."""
        text = question.strip()
        if len(text) > self.settings.max_question_chars:
            raise QuestionTooLong(count=len(text), limit=self.settings.max_question_chars)
        return text

    async def _conversation(self, request: AskRequest) -> Conversation:
        return await conversation_of(self.conversations, request)

    async def _declared_facts(self) -> Declared:
        """What the model's ``qwen_ui.json`` declares (whether it answers without images,
        whether its prompt labels images), read once per snapshot (it is immutable)."""
        snapshot = await asyncio.to_thread(self.pipelines.snapshot)
        if snapshot.id not in self._declared:
            path = Path(snapshot.path)
            self._declared[snapshot.id] = await asyncio.to_thread(read_declared, path)
        return self._declared[snapshot.id]

    async def _decode(
        self,
        blobs: Sequence[bytes],
        out: list[image_checks.CheckedImage],
        conversation: Conversation | None = None,
    ) -> AsyncIterator[Event]:
        """Check and decode the new images; stages number them after the conversation's
        (errors name them by their place in the upload)."""
        before = len(conversation.images) if conversation is not None else 0
        image_checks.check_count(len(blobs), self.limits)
        for i, data in enumerate(blobs):
            image_checks.check_bytes(data, i + 1, self.limits)
        start = time.perf_counter()
        for i, data in enumerate(blobs):
            yield Stage.at("decoding", before + i + 1, before + len(blobs))
            out.append(await asyncio.to_thread(image_checks.check, data, i + 1, self.limits))
        if blobs:
            self.metrics.stage.labels("decoding").observe(time.perf_counter() - start)
        self.metrics.images.observe(len(blobs))

    async def _history(
        self, request: AskRequest, conversation: Conversation, new_images: int
    ) -> History:
        """The earlier turns the prompt keeps; their images are read (once) only when
        admission needs their sizes, otherwise on an embedding cache miss (a stateless
        request carries them)."""
        tenant = request.tenant
        # images attached before this question (a stopped or failed turn) join it; the
        # request's own images are already attached at the end of ``pending``
        earlier = conversation.pending[: max(0, len(conversation.pending) - new_images)]
        turns = self._history_window(conversation, new_images + len(earlier))
        images: dict[str, bytes] = {}
        if request.history is not None:
            images = {sha256(b): b for t in request.history for b in t.images}
        elif self.admission is not None:
            for sha in [*(sha for turn in turns for sha in turn.images), *earlier]:
                images[sha] = await self.conversations.image(tenant, sha)
        return History(turns, images, earlier)

    # --- admission: plain data out, a reservation back ------------------------------------
    async def _fit(
        self,
        request: AskRequest,
        turns: list[Turn],
        history: History,
        checked: Sequence[image_checks.CheckedImage],
        sampling: SamplingOptions,
    ) -> Fit:
        if self.admission is None:
            return Fit(0)
        sizes = [c.size for c in checked]
        shape = await self._shape(request, turns, history, sizes, sampling.max_new_tokens)
        return await self.admission.fit(shape)

    async def _shape(
        self,
        request: AskRequest,
        turns: list[Turn],
        history: History,
        new_sizes: Sequence[Size],
        max_new_tokens: int,
    ) -> AskShape:
        served = await self.served_model()
        return AskShape(
            tenant=request.tenant,
            request_id=request.request_id,
            text_tokens=await asyncio.to_thread(served.text_tokens, turns),
            past_sizes=tuple(
                _header_size(history.images[sha])
                for sha in [*(s for t in history.turns for s in t.images), *history.earlier]
            ),
            new_sizes=tuple(new_sizes),
            max_new_tokens=max_new_tokens,
        )

    def _reserve(
        self, tenant: str, fit: Fit, events: asyncio.Queue[Event]
    ) -> AbstractAsyncContextManager[Any]:
        if self.admission is None:
            return nullcontext()

        def report(ahead: int, wait_s: float = 0.0) -> None:
            events.put_nowait(Stage("queued", ahead=ahead, wait_s=wait_s))

        return self.admission.reserve(tenant, fit, report)

    async def served_model(self) -> ServedModel:
        """The served model's facts (computed once per snapshot, from its config and
        processor, without loading the weights), told to admission; once the weights are
        loaded, their resident bytes are measured on the worker and told too."""
        async with self._served_lock:
            snapshot = await asyncio.to_thread(self.pipelines.snapshot)
            if self._served is None or self._served.facts.snapshot_id != snapshot.id:
                self._served = await asyncio.to_thread(
                    read_model, Path(snapshot.path), snapshot.id, self.settings, self.placement
                )
            if self.admission is not None:
                self.admission.use(self._served.facts)
                await self._tell_resident(self.admission)
            return self._served

    async def _tell_resident(self, admission: Admission) -> None:
        """Measure the weights on the worker between two jobs (no request's activations
        are counted; nor the continuous batch's slot cache, whose sequences admission
        holds reservations for), once they are loaded (CUDA only)."""
        if self._resident_told or self.placement.device != "cuda":
            return
        if not self.pipelines.is_loaded:
            return
        batch = self.batch
        job = self.worker.submit(
            lambda _job: int(torch.cuda.memory_allocated()) - (batch.cache.nbytes if batch else 0)
        )
        async for _ in job.events():
            pass
        self._resident_told = True
        admission.loaded(job.result)

    async def shape(self, request: AskRequest, new_sizes: Sequence[Size]) -> AskShape:
        """``request``'s shape as :meth:`ask` computes it, for images of ``new_sizes``
        (tools and tests that size a request without running it)."""
        question = self._question(request.question)
        conversation = await self._conversation(request)
        history = await self._history(request, conversation, len(new_sizes))
        total = len(conversation.images) + len(new_sizes)  # the new ones as if attached
        labelled = (await self._declared_facts()).vision_ids
        turns = _turns(history, question, len(new_sizes), total if labelled else 0)
        max_new = self._sampling(request.options).max_new_tokens
        return await self._shape(request, turns, history, new_sizes, max_new)

    # --- the plan -----------------------------------------------------------------------
    async def _plan(
        self,
        request: AskRequest,
        turns: list[Turn],
        history: History,
        checked: Sequence[image_checks.CheckedImage],
        sampling: SamplingOptions,
        started: float,
    ) -> Plan:
        snapshot = await asyncio.to_thread(self.pipelines.snapshot)
        settings_key = self._processor_key()
        prompt_images: list[PromptImage] = []
        earlier = [sha for turn in history.turns for sha in turn.images] + history.earlier
        for sha in earlier:
            prompt_images.append(
                await self._history_image(request.tenant, sha, snapshot.id, history.images)
            )
        for image in checked:
            key = CacheKey(request.tenant, image.sha256, settings_key, snapshot.id)
            embedding, tier = await self.cache.fetch(key)
            pixels = None if embedding is not None else await asyncio.to_thread(image.load)
            prompt_images.append(PromptImage(key, embedding, pixels, tier))
        for item in prompt_images:
            self.metrics.cache.labels(item.tier).inc()
        return Plan(turns, prompt_images, sampling, started)

    def _processor_key(self) -> str:
        s = self.settings
        return f"min={s.min_pixels},max={s.max_pixels}"

    def _history_window(self, conversation: Conversation, new_images: int) -> list[StoredTurn]:
        return recent_turns(conversation.turns, new_images, self.settings.max_images)

    async def _history_image(
        self, tenant: str, sha: str, snapshot_id: str, read: dict[str, bytes]
    ) -> PromptImage:
        key = CacheKey(tenant, sha, self._processor_key(), snapshot_id)
        embedding, tier = await self.cache.fetch(key)
        if embedding is not None:
            return PromptImage(key, embedding, None, tier)
        data = read.get(sha) or await self.conversations.image(tenant, sha)
        checked = await asyncio.to_thread(image_checks.decode, data, 1, self.limits)
        return PromptImage(key, None, checked.image, "miss")

    async def _finish(
        self,
        request: AskRequest,
        conversation: Conversation,
        checked: Sequence[image_checks.CheckedImage],
        plan: Plan,
        result: WorkResult,
        files: dict[str, bytes],
    ) -> Event:
        for key, embedding in result.new_embeddings:
            await self.cache.put_remote(key, embedding)
        if result.outcome.finish_reason == "cancelled":
            return Failed.of(AnswerFailed(), request.lang)
        if request.history is None:
            # the turn's images were attached before the work started (``pending``)
            turn = StoredTurn(plan.turns[-1].question, result.answer, [])
            await self.conversations.append(conversation, turn, {})
        self.status.record_answer()
        self._observe(result)
        hits = sum(1 for item in plan.images if item.tier != "miss")
        reason: Literal["stop", "length"] = (
            "length" if result.outcome.finish_reason == "length" else "stop"
        )
        result.timings["total"] = round(time.perf_counter() - plan.started, 4)
        text, boxes = await self._locate(request.tenant, plan, result, files)
        return Done(
            answer=result.answer,
            conversation_id=conversation.id,
            prompt_tokens=result.prompt_tokens,
            completion_tokens=len(result.outcome.tokens),
            images=len(checked),
            cache_hits=hits,
            images_seen=len(plan.images),
            finish_reason=reason,
            timings=result.timings,
            boxes=[box.to_dict() for box in boxes],
            answer_text=text,
        )

    async def _locate(
        self, tenant: str, plan: Plan, result: WorkResult, files: dict[str, bytes]
    ) -> tuple[str, list[Box]]:
        """The answer with its boxes as labels, and the boxes on the original files of the
        prompt's images, each naming its image by its number in the conversation: a
        question asked again over images already in the conversation (a retry, an edit,
        a follow-up) locates on them too. Files not at hand are read from the store."""
        seen = PromptImages(
            tuple(
                SeenImage(item.number, item.key.sha256, grid)
                for item, grid in zip(plan.images, result.grids, strict=False)
            ),
            plan.turns[-1].image_count if plan.turns else 0,
        )
        parsed = await asyncio.to_thread(find_boxes, result.answer, result.family, seen)
        if parsed is None or result.family is None:
            return result.answer, []
        found = dict(files)
        for image in images_of(parsed, seen):
            if image.sha256 not in found:
                with suppress(ConversationNotFound):  # expired: its boxes are dropped
                    found[image.sha256] = await self.conversations.image(tenant, image.sha256)
        boxes = await asyncio.to_thread(
            locate_seen, parsed, seen, found, result.family, result.patch
        )
        return parsed.text, boxes

    def _observe(self, result: WorkResult) -> None:
        t = result.timings
        for stage in ("loading_model", "encoding", "prefill", "decode"):
            if stage in t:
                self.metrics.stage.labels(stage).observe(t[stage])
        if "ttft" in t:
            self.metrics.ttft.observe(t["ttft"])
        n = len(result.outcome.tokens)
        self.metrics.tokens.inc(n)
        if n > 1 and t.get("decode", 0) > 0:
            self.metrics.tokens_per_second.observe((n - 1) / t["decode"])

    # --- worker-side work ---------------------------------------------------------------
    def _generation(
        self, model: PreTrainedModel, prompt: Prompt, sampling: SamplingOptions
    ) -> Generation:
        """The request's decoding state, in the configured decode mode. The static caches,
        the compiled step and the recorded prefills belong to this worker (one request at a
        time), per model."""
        mode = decode_mode_for(self.settings.decode_mode, model.device.type)
        if mode == "eager":
            return Generation(model, prompt, sampling)
        if self._decoder is None or self._decoder.model is not model:
            self._decoder = Decoder.build(model, self.settings)
        d = self._decoder
        return Generation(model, prompt, sampling, "static", d.pool, d.step, d.graphs)

    def _lone_prefill(self, model: PreTrainedModel) -> PrefillGraphs:
        """The batch's recorded prefills for newcomers that join alone, per model (the
        worker's, as the one-request path's are)."""
        if self._lone_graphs is None or self._lone_graphs.model is not model:
            self._lone_graphs = PrefillGraphs(model, self.fast_path.prefill_graph_rows)
        return self._lone_graphs

    def _load(self, job: Job[WorkResult], timings: dict[str, float]) -> None:
        if not self.pipelines.is_loaded:
            job.emit(Stage.at("loading_model"))
            t0 = time.perf_counter()
            self.pipelines.load()
            timings["loading_model"] = round(time.perf_counter() - t0, 4)

    def _work(self, job: Job[WorkResult], plan: Plan) -> WorkResult:
        """One request alone, from encoding to its last token (``max_batch`` = 1)."""
        timings: dict[str, float] = {}
        self._load(job, timings)
        encoded = self._encode(job, plan, timings)
        if encoded is None:
            return WorkResult("", Outcome([], "cancelled"), 0, [], timings)
        language = self.pipelines.language()
        prompt = language.build_prompt(plan.turns, encoded[0])
        job.emit(Stage.at("answering", prompt_tokens=prompt.length))
        generation = self._generation(language.model, prompt, plan.sampling)
        answer = Answering(job, plan, language, prompt.length, encoded, timings)
        outcome = run(generation, language.stop_ids, answer.on_token, job.cancelled)
        return answer.result(outcome)

    def _join(self, job: Job[WorkResult], plan: Plan) -> None:
        """Hand the request to the continuous batch, which ends the job: it is encoded and
        prefilled with the other newcomers at the next step boundary."""
        assert self.batch is not None
        timings: dict[str, float] = {}
        self._load(job, timings)
        self.batch.enter(Entrant(job, plan, timings))
        job.defer()

    def _prepare(self, entrants: list[Entrant]) -> list[BatchSequence]:
        """The newcomers' sequences; beside running answers (with a join chunk), their
        images go through the tower one at a time, which bounds the activations held
        beside the batch's cache as admission counts them."""
        running = self.batch is not None and bool(self.batch.running)
        one_by_one = running and self.settings.batch_prefill_tokens > 0
        vision, language = self.pipelines.vision(), self.pipelines.language()
        return prepare(entrants, vision, language, self.cache, one_by_one)

    def _encode(
        self, job: Job[WorkResult], plan: Plan, timings: dict[str, float]
    ) -> Encoded | None:
        vision = self.pipelines.vision()
        embeddings: list[Embedding] = []
        fresh: list[tuple[CacheKey, Embedding]] = []
        t0 = time.perf_counter()
        patches = 0.0
        total = plan.total_images or len(plan.images)
        for i, item in enumerate(plan.images):
            number = item.number or i + 1
            job.emit(Stage.at("encoding", number, total, cached=item.embedding is not None))
            embedding = item.embedding
            if embedding is None:
                assert item.image is not None
                parts: dict[str, float] = {}
                embedding = vision.encode_many([item.image], parts)[0]
                patches += parts["patches"]
                self.cache.put_memory(item.key, embedding)
                fresh.append((item.key, embedding))
            embeddings.append(embedding)
            if job.cancelled():
                return None
        if total:
            timings["encoding"] = round(time.perf_counter() - t0, 4)
        if fresh:
            timings["patches"] = round(patches, 4)
        return embeddings, fresh


def _numbered(plan: Plan, total: int) -> Plan:
    """The plan's images numbered by their place in the conversation of ``total`` images
    (the prompt holds its latest ones)."""
    first = total - len(plan.images)
    images = [replace(item, number=first + i + 1) for i, item in enumerate(plan.images)]
    return replace(plan, images=images, total_images=total)


def _turns(history: History, question: str, new_images: int, total: int = 0) -> list[Turn]:
    """The prompt's turns: the kept earlier ones, then the question asked now. With
    ``total`` (the conversation's images, the prompt holding the latest ones), each turn
    carries its first image's number for the prompt's labels."""
    turns = [Turn(t.question, len(t.images), t.answer) for t in history.turns]
    turns.append(Turn(question, new_images))
    if not total:
        return turns
    number = total - sum(turn.image_count for turn in turns) + 1
    numbered = []
    for turn in turns:
        numbered.append(replace(turn, first_image=number))
        number += turn.image_count
    return numbered


def _header_size(data: bytes) -> Size:
    """An earlier turn's image size from its header (what admission sizes it by)."""
    with Image.open(io.BytesIO(data)) as image:
        return image.size


def _downscale(
    images: Sequence[image_checks.CheckedImage], sizes: Sequence[Size], max_pixels: int
) -> list[image_checks.CheckedImage]:
    """The images resized to admission's ``sizes`` (those already that size unchanged)."""
    out = []
    for item, size in zip(images, sizes, strict=True):
        if size == item.size:
            out.append(item)
            continue
        image = item.image.resize(size, Image.Resampling.BICUBIC)
        # a new identity, so the smaller image's embedding gets its own cache entry
        sha = f"{item.sha256}-max{max_pixels}"
        out.append(replace(item, pixels=image, size=image.size, sha256=sha))
    return out


@dataclass(frozen=True)
class Decoder:
    """What the worker keeps per model for static decoding."""

    model: PreTrainedModel
    pool: CachePool
    step: Callable[..., Any] | None  # the compiled decode step
    graphs: PrefillGraphs | None  # recorded prefills

    @classmethod
    def build(cls, model: PreTrainedModel, settings: Settings) -> Decoder:
        path = fast_path(settings, model.device.type)
        step = compiled_step(model) if path.compile_decode else None
        rows = path.prefill_graph_rows
        graphs = PrefillGraphs(model, rows) if rows > 0 else None
        return cls(model, CachePool(model, settings.static_cache_pool_bytes), step, graphs)


class EnteredAdmission:
    """Enter an admission context while relaying its queue-position events."""

    def __init__(self, manager: AbstractAsyncContextManager[Any], events: asyncio.Queue[Event]):
        self.manager = manager
        self.events = events
        self.entered = False
        self.entering: asyncio.Future[Any] | None = None

    async def __aenter__(self) -> AsyncIterator[Event]:
        return self._wait()

    async def _wait(self) -> AsyncIterator[Event]:
        self.entering = entering = asyncio.ensure_future(self.manager.__aenter__())
        try:
            while not entering.done():
                getter = asyncio.ensure_future(self.events.get())
                await asyncio.wait({entering, getter}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield getter.result()
                else:
                    getter.cancel()
            entering.result()
            self.entered = True
            while not self.events.empty():
                yield self.events.get_nowait()
        except BaseException:
            entering.cancel()
            raise

    async def __aexit__(self, *exc: Any) -> bool | None:
        if not self.entered and not await self._granted():
            return None
        return await self.manager.__aexit__(*exc)

    async def _granted(self) -> bool:
        """Whether the manager was entered although the caller left before ``_wait`` saw
        it (while relaying a queued event): that reservation must be released too. A
        manager still waiting is cancelled, and its own cancellation path has run when
        this returns (the caller's place in line is gone)."""
        entering = self.entering
        if entering is None:
            return False
        if not entering.done():
            entering.cancel()
            await asyncio.wait({entering})
        return not entering.cancelled() and entering.exception() is None
