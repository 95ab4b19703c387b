"""A request's work on the worker thread, from its plan to its result: the plan's data,
the answer as its tokens arrive (detokenizing, token events, timings), and the batched
path's newcomers (:class:`Entrant`): their images encoded together, their prompts built,
each turned into a :class:`~qwen_ui.engine.batching.Sequence` that reports to its job.
"""

from __future__ import annotations

import time
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field

from PIL import Image

from qwen_ui.engine.batching import Sequence
from qwen_ui.engine.boxes import Family
from qwen_ui.engine.cache import CacheKey, Embedding, EmbeddingCache
from qwen_ui.engine.detokenize import TextStream
from qwen_ui.engine.events import Stage, Token, answering_progress
from qwen_ui.engine.generate import Outcome, SamplingOptions
from qwen_ui.engine.pipelines import LanguagePipeline, Turn, VisionPipeline
from qwen_ui.engine.worker import Job


@dataclass(frozen=True)
class PromptImage:
    """An image of the prompt: its cache key, and either its embedding or its pixels."""

    key: CacheKey
    embedding: Embedding | None
    image: Image.Image | None
    tier: str  # "memory", "redis" or "miss"
    number: int = 0  # 1-based place in the conversation


@dataclass(frozen=True)
class Plan:
    turns: list[Turn]
    images: list[PromptImage]
    sampling: SamplingOptions
    started: float
    total_images: int = 0  # images in the whole conversation (stage labels count them)


@dataclass
class WorkResult:
    answer: str
    outcome: Outcome
    prompt_tokens: int
    new_embeddings: list[tuple[CacheKey, Embedding]]
    timings: dict[str, float]
    grids: list[tuple[int, int, int]] = field(default_factory=list)  # the prompt's images
    family: Family | None = None  # the model's box format
    patch: int = 14  # the vision tower's patch side in pixels


Encoded = tuple[list[Embedding], list[tuple[CacheKey, Embedding]]]  # all, and the new ones


class Answering:
    """One request's answer as its tokens arrive: text deltas as token events, the time
    of the first token, and at the end the :class:`WorkResult`."""

    def __init__(
        self,
        job: Job[WorkResult],
        plan: Plan,
        language: LanguagePipeline,
        prompt_tokens: int,
        encoded: Encoded,
        timings: dict[str, float],
    ) -> None:
        self.job = job
        self.plan = plan
        self.language = language
        self.prompt_tokens = prompt_tokens
        self.encoded = encoded
        self.timings = timings
        self.stream = TextStream(language.decode)
        self.started = time.perf_counter()
        self.first: float | None = None

    def on_token(self, token: int) -> None:
        if self.first is None:
            self.first = time.perf_counter()
        self._emit(self.stream.push(token))

    def _emit(self, text: str) -> None:
        count = len(self.stream.tokens)
        progress = answering_progress(count, self.plan.sampling.max_new_tokens)
        self.job.emit(Token(text, count, progress))

    def result(self, outcome: Outcome) -> WorkResult:
        end = time.perf_counter()
        if rest := self.stream.flush():
            self._emit(rest)
        if self.first is not None:
            self.timings["prefill"] = round(self.first - self.started, 4)
            self.timings["decode"] = round(end - self.first, 4)
            self.timings["ttft"] = round(self.first - self.plan.started, 4)
        embeddings, fresh = self.encoded
        language = self.language
        return WorkResult(
            self.stream.text(),
            outcome,
            self.prompt_tokens,
            fresh,
            self.timings,
            [e.grid_thw for e in embeddings],
            language.family,
            language.patch,
        )


@dataclass(eq=False)
class Entrant:
    """A request waiting to join the batch (the model is loaded by then)."""

    job: Job[WorkResult]
    plan: Plan
    timings: dict[str, float]

    def cancelled(self) -> bool:
        return self.job.cancelled()

    def fail(self, error: BaseException) -> None:
        self.job.fail(error)

    def end_cancelled(self) -> None:
        self.job.finish(WorkResult("", Outcome([], "cancelled"), 0, [], self.timings))


def prepare(
    entrants: list[Entrant],
    vision: VisionPipeline,
    language: LanguagePipeline,
    cache: EmbeddingCache,
    one_by_one: bool = False,
) -> list[Sequence]:
    """The newcomers' sequences: cancelled ones end here, the others' images missing from
    the cache are encoded in one call (``one_by_one``: one call per image, so that the
    tower's activations are one image's), their prompts built; one that cannot be built
    fails alone."""
    live = [e for e in entrants if not e.cancelled()]
    for entrant in entrants:
        if entrant.cancelled():
            entrant.end_cancelled()
    sequences: list[Sequence] = []
    encoded_all = encode_together(live, vision, cache, one_by_one)
    for entrant, encoded in zip(live, encoded_all, strict=True):
        try:
            sequences.append(sequence_of(entrant, language, encoded))
        except Exception as exc:
            entrant.fail(exc)
    return sequences


def encode_together(
    entrants: Seq[Entrant], vision: VisionPipeline, cache: EmbeddingCache, one_by_one: bool = False
) -> list[Encoded]:
    """Every entrant's embeddings (from the cache, or the vision tower: all misses of all
    entrants in one call, or one call each with ``one_by_one``), with a stage event per
    image."""
    start = time.perf_counter()
    misses: list[tuple[int, int]] = []  # (entrant, image)
    for k, entrant in enumerate(entrants):
        plan = entrant.plan
        total = plan.total_images or len(plan.images)
        for i, item in enumerate(plan.images):
            cached = item.embedding is not None
            entrant.job.emit(Stage.at("encoding", item.number or i + 1, total, cached=cached))
            if not cached:
                misses.append((k, i))
    images = [entrants[k].plan.images[i].image for k, i in misses]
    parts: dict[str, float] = {}
    new = _encoded(vision, [image for image in images if image is not None], parts, one_by_one)
    found: list[list[Embedding | None]] = [[p.embedding for p in e.plan.images] for e in entrants]
    fresh: list[list[tuple[CacheKey, Embedding]]] = [[] for _ in entrants]
    for (k, i), embedding in zip(misses, new, strict=True):
        key = entrants[k].plan.images[i].key
        cache.put_memory(key, embedding)
        fresh[k].append((key, embedding))
        found[k][i] = embedding
    elapsed = round(time.perf_counter() - start, 4)
    out: list[Encoded] = []
    for k, entrant in enumerate(entrants):
        if entrant.plan.images:
            entrant.timings["encoding"] = elapsed
            entrant.timings.update(parts)
        out.append(([e for e in found[k] if e is not None], fresh[k]))
    return out


def _encoded(
    vision: VisionPipeline, images: list[Image.Image], parts: dict[str, float], one_by_one: bool
) -> list[Embedding]:
    """``images``' embeddings from one pass of the tower, or one pass each (``parts``:
    the seconds their patches took, in all)."""
    if not one_by_one:
        return vision.encode_many(images, parts)
    out: list[Embedding] = []
    for image in images:
        part: dict[str, float] = {}
        out += vision.encode_many([image], part)
        parts["patches"] = round(parts.get("patches", 0.0) + part.get("patches", 0.0), 4)
    return out


def sequence_of(entrant: Entrant, language: LanguagePipeline, encoded: Encoded) -> Sequence:
    """The entrant's prompt as a sequence that streams to its job and ends it."""
    plan, job = entrant.plan, entrant.job
    prompt = language.build_prompt(plan.turns, encoded[0])
    job.emit(Stage.at("answering", prompt_tokens=prompt.length))
    answer = Answering(job, plan, language, prompt.length, encoded, entrant.timings)
    return Sequence(
        prompt,
        plan.sampling,
        frozenset(language.stop_ids),
        answer.on_token,
        lambda outcome: job.finish(answer.result(outcome)),
        job.fail,
        job.cancelled,
    )
