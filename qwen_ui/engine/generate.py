"""The decoding loop: prefill once, then one forward call per token.

Everything that changes during an answer (the KV cache, the multimodal rope offset, the
sampling generator) lives in :class:`Generation`, which belongs to one request. The shared
model object is only called, never written to: positions are computed per request with
``get_rope_index`` and passed explicitly, so ``model.model.rope_deltas`` is never read.

``Generation.advance`` is the only per-token work (one forward call, then the choice of
the next token, both queued on the device); a static KV cache or a compiled step can
replace it without touching the loop.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import torch
from transformers import PreTrainedModel, StaticCache
from transformers.modeling_outputs import BaseModelOutputWithPooling

if TYPE_CHECKING:
    from qwen_ui.engine.prefill_graphs import PrefillGraphs

DecodeMode = Literal["eager", "static"]
CACHE_BUCKET = 256  # static caches come in lengths that are multiples of this
# batch-size buckets (slots.SLOT_BUCKETS) of every loaded model share one code object
BATCHED_RECOMPILES = 64


def decode_mode_for(setting: str, device_type: str) -> DecodeMode:
    """The decode mode a setting means on a device ('auto' = static on CUDA)."""
    if setting == "auto":
        return "static" if device_type == "cuda" else "eager"
    return "static" if setting == "static" else "eager"


def cache_length(needed: int, bucket: int = CACHE_BUCKET) -> int:
    """The static cache length for ``needed`` positions: the next multiple of ``bucket``,
    so that a compiled decode step sees a handful of shapes, not one per request."""
    return max(bucket, -(-needed // bucket) * bucket)


class CachePool:
    """Static KV caches by length, owned by the worker thread (one request at a time), so a
    captured decode step finds its cache tensors at the same addresses on every request.
    ``take`` hands out a reset cache; nothing here belongs to the shared model.

    Idle caches are kept up to ``max_bytes`` in all (settings.static_cache_pool_bytes,
    which admission keeps out of the request budget); past that the least recently used
    go, so requests of many different lengths cannot fill the device."""

    def __init__(self, model: PreTrainedModel, max_bytes: int | None = None) -> None:
        self.config = model.config
        self.max_bytes = max_bytes
        self._free: OrderedDict[int, tuple[StaticCache, int]] = OrderedDict()

    @property
    def idle_bytes(self) -> int:
        return sum(size for _, size in self._free.values())

    def take(self, length: int) -> StaticCache:
        kept = self._free.pop(length, None)
        if kept is None:
            return StaticCache(config=self.config, max_cache_len=length)
        with torch.inference_mode():
            kept[0].reset()
        return kept[0]

    def give_back(self, length: int, cache: StaticCache) -> None:
        self._free[length] = (cache, cache_bytes(cache))
        self._free.move_to_end(length)
        while self.max_bytes is not None and self._free and self.idle_bytes > self.max_bytes:
            self._free.popitem(last=False)

    def clear(self) -> None:
        self._free.clear()


def cache_bytes(cache: StaticCache) -> int:
    """Bytes of a static cache's key and value tensors (allocated when it was made)."""
    total = 0
    for layer in cache.layers:
        for name in ("keys", "values"):
            tensor = getattr(layer, name, None)
            if isinstance(tensor, torch.Tensor):
                total += tensor.numel() * tensor.element_size()
    return total


@dataclass(frozen=True)
class SamplingOptions:
    max_new_tokens: int
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass
class ImageOutputs(BaseModelOutputWithPooling):  # type: ignore[misc]
    """Precomputed vision outputs with Qwen3-VL's deepstack features."""

    deepstack_features: list[tuple[torch.Tensor, ...]] | None = None


@dataclass
class Prompt:
    """A tokenized prompt with its images' precomputed embeddings (in prompt order)."""

    input_ids: torch.Tensor  # [1, L]
    mm_token_type_ids: torch.Tensor  # [1, L], 1 at image tokens
    image_grid_thw: torch.Tensor | None  # [n, 3]
    image_features: list[torch.Tensor] = field(default_factory=list)
    deepstack: list[torch.Tensor] = field(default_factory=list)  # Qwen3-VL, per image

    def encoder_outputs(self, device: torch.device) -> Any:
        """What ``mm_encoder_outputs["image"]`` expects: one tensor per image, plus per
        deepstack layer a tuple of per-image tensors (Qwen3-VL)."""
        pooled = tuple(f.to(device) for f in self.image_features)
        if not self.deepstack:
            return BaseModelOutputWithPooling(pooler_output=pooled)  # type: ignore[arg-type]
        layers = self.deepstack[0].shape[0]
        deepstack = [tuple(d[i].to(device) for d in self.deepstack) for i in range(layers)]
        return ImageOutputs(pooler_output=pooled, deepstack_features=deepstack)  # type: ignore[arg-type]

    @property
    def length(self) -> int:
        return int(self.input_ids.shape[1])


@dataclass(frozen=True)
class Outcome:
    tokens: list[int]
    finish_reason: Literal["stop", "length", "cancelled"]


def prompt_positions(model: PreTrainedModel, prompt: Prompt) -> tuple[torch.Tensor, int]:
    """3-D rope positions ``[3, 1, L]`` of the prompt and the offset of later text tokens."""
    if prompt.image_grid_thw is None:
        positions = torch.arange(prompt.length, device=prompt.input_ids.device)
        return positions.view(1, 1, -1).expand(3, 1, -1), 0
    positions, deltas = model.model.get_rope_index(
        prompt.input_ids,
        mm_token_type_ids=prompt.mm_token_type_ids,
        image_grid_thw=prompt.image_grid_thw,
    )
    return positions, int(deltas.reshape(-1)[0].item())


@dataclass(frozen=True)
class Pending:
    """A chosen token not yet read by the host: ``token`` on the device (what the next step
    is fed) and, on CUDA, ``host``, its copy in pinned memory, with ``done``, an event
    recorded after that copy. Reading waits for that event only: a ``.item()`` on the device
    tensor would be queued behind every step launched since, and wait for them too."""

    token: torch.Tensor
    host: torch.Tensor | None = None
    done: torch.cuda.Event | None = None

    def read(self) -> int:
        if self.done is None or self.host is None:
            return int(self.token.item())
        self.done.synchronize()
        return int(self.host.item())


class Generation:
    """One request's decoding state on one model."""

    def __init__(
        self,
        model: PreTrainedModel,
        prompt: Prompt,
        options: SamplingOptions,
        decode_mode: DecodeMode = "eager",
        pool: CachePool | None = None,
        step_forward: Callable[..., Any] | None = None,
        graphs: PrefillGraphs | None = None,
    ) -> None:
        """``decode_mode="static"`` decodes into a fixed-length :class:`StaticCache` (from
        ``pool`` when given, else a fresh one for this request) with the step's inputs in
        fixed tensors, so ``step_forward`` may be a compiled/graph-captured ``model.forward``
        (see :func:`compiled_step`); there ``graphs`` may replay the prefill from a
        recorded graph (:mod:`qwen_ui.engine.prefill_graphs`)."""
        self.model = model
        self.prompt = prompt
        self.options = options
        self.device = prompt.input_ids.device
        self.cache: Any = None
        self.rope_delta = 0
        self.position = 0  # sequence position of the next token (before the rope offset)
        self.generator = _generator(options.seed, self.device)
        self.decode_mode = decode_mode
        self.pool = pool
        self.step_forward = step_forward or model
        self.graphs = graphs if decode_mode == "static" else None
        self.cache_len = 0
        self._ids = torch.zeros((1, 1), dtype=torch.long, device=self.device)
        self._pos = torch.zeros((3, 1, 1), dtype=torch.long, device=self.device)
        # queue the next step before reading the current token (see :func:`run`): only
        # where the device runs apart from the host
        self.ahead = self.device.type == "cuda"
        self._ring: list[tuple[torch.Tensor, torch.cuda.Event]] = []
        self._turn = 0

    @torch.inference_mode()
    def prefill(self) -> int:
        return self.choose(self._prefill())

    @torch.inference_mode()
    def start(self) -> Pending:
        """Queue the prefill and the choice of the first token, returned as a
        :class:`Pending`: the host need not wait for it before queueing more."""
        return self._pending(self.pick(self._prefill()))

    def _prefill(self) -> torch.Tensor:
        positions, self.rope_delta = prompt_positions(self.model, self.prompt)
        self.position = self.prompt.length
        if self.decode_mode == "static":
            self.cache = self._static_cache()
            if self.graphs is not None and self.graphs.fits(self.prompt):
                return self.graphs.prefill(self.prompt, positions, self.cache)
        kwargs: dict[str, Any] = {}
        if self.prompt.image_features:
            kwargs["mm_encoder_outputs"] = {"image": self.prompt.encoder_outputs(self.device)}
            kwargs["image_grid_thw"] = self.prompt.image_grid_thw
            kwargs["mm_token_type_ids"] = self.prompt.mm_token_type_ids
        out = self.model(
            input_ids=self.prompt.input_ids,
            position_ids=positions,
            cache=self.cache,
            use_cache=True,
            logits_to_keep=1,
            **kwargs,
        )
        self.cache = out.cache
        return out.logits[:, -1, :]  # type: ignore[no-any-return]

    def _static_cache(self) -> StaticCache:
        self.cache_len = cache_length(self.prompt.length + self.options.max_new_tokens)
        if self.pool is not None:
            return self.pool.take(self.cache_len)
        return StaticCache(config=self.model.config, max_cache_len=self.cache_len)

    @torch.inference_mode()
    def step(self, token: int) -> int:
        """The token after ``token`` (waits for the device)."""
        return self.choose(self._forward(token))

    @torch.inference_mode()
    def advance(self, token: Pending | int) -> Pending:
        """Queue the step fed by ``token`` (from :meth:`start` or an earlier call, fed on
        the device) and the choice of its successor, returned the same way: nothing here
        waits for the device, so on CUDA the host can queue step n + 1 while step n runs."""
        fed = token if isinstance(token, int) else token.token
        return self._pending(self.pick(self._forward(fed)))

    def _pending(self, token: torch.Tensor) -> Pending:
        """On CUDA, also queue the token's copy into pinned host memory and an event after
        it, from a ring of four (at most three tokens are ever unread)."""
        if self.device.type != "cuda":
            return Pending(token)
        if not self._ring:
            self._ring = [
                (torch.empty(1, dtype=torch.long, pin_memory=True), torch.cuda.Event())  # type: ignore[no-untyped-call]
                for _ in range(4)
            ]
        host, done = self._ring[self._turn % len(self._ring)]
        self._turn += 1
        host.copy_(token, non_blocking=True)
        done.record()
        return Pending(token, host, done)

    def _forward(self, token: int | torch.Tensor) -> torch.Tensor:
        ids, pos = self._inputs(token)
        if self.decode_mode == "static":
            out = self.step_forward(
                input_ids=ids, position_ids=pos, cache=self.cache, use_cache=True
            )
        else:
            out = self.model(input_ids=ids, position_ids=pos, cache=self.cache, use_cache=True)
            self.cache = out.cache
        self.position += 1
        return out.logits[:, -1, :]  # type: ignore[no-any-return]

    def _inputs(self, token: int | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The step's token and positions: in static mode the same two tensors every step
        (a captured step reads them where it was recorded), written on the device."""
        position = self.position + self.rope_delta
        if self.decode_mode != "static":
            ids = _as_ids(token, self.device)
            return ids, torch.full((3, 1, 1), position, device=self.device)
        if isinstance(token, int):
            self._ids.fill_(token)
        else:
            self._ids.copy_(token.view(1, 1))
        self._pos.fill_(position)
        return self._ids, self._pos

    def choose(self, logits: torch.Tensor) -> int:
        return int(self.pick(logits).item())

    def pick(self, logits: torch.Tensor) -> torch.Tensor:
        """The next token as a device tensor ``[1]``: the argmax, or a sample."""
        if self.options.greedy:
            return torch.argmax(logits, dim=-1).view(1)
        return sample_on_device(
            logits.float(), self.options.temperature, self.options.top_p, self.generator
        )

    def release(self) -> None:
        if self.pool is not None and self.cache is not None and self.decode_mode == "static":
            self.pool.give_back(self.cache_len, self.cache)
        self.cache = None


def compiled_step(model: PreTrainedModel) -> Callable[..., Any]:
    """``model.forward`` compiled with CUDA graphs (``mode="reduce-overhead"``) for the
    static decode step. CUDA only: the caller (the worker) keeps one per loaded model and
    only asks for it when compiling is switched on."""
    return torch.compile(model.forward, mode="reduce-overhead", dynamic=False)  # type: ignore[no-any-return]


def batched_step(model: PreTrainedModel) -> Callable[..., Any]:
    """``model.forward`` through Inductor for the decode steps of continuous batching:
    one compile per batch-size bucket (at the one cache length
    :class:`~qwen_ui.engine.decode_graphs.DecodeGraphs` compiles for), whose kernels it
    then records as CUDA graphs itself (so no ``reduce-overhead``). Inductor fuses the
    norms, rotary embeddings, gated activations and the grouped attention
    (:func:`~qwen_ui.engine.fused.decode_attention`) that an eager step runs as hundreds of
    small kernels per step. Every loaded model's buckets are entries of the one compiled
    code object, so the recompile limit is raised; past it a step runs eagerly."""
    limit = torch._dynamo.config.recompile_limit
    torch._dynamo.config.recompile_limit = max(limit, BATCHED_RECOMPILES)
    return torch.compile(model.forward, dynamic=False)  # type: ignore[no-any-return]


def run(
    generation: Generation,
    stop_ids: Sequence[int],
    on_token: Callable[[int], None],
    cancelled: Callable[[], bool],
) -> Outcome:
    """Prefill and decode until a stop token, the token cap, or cancellation.

    On an asynchronous device (``generation.ahead``), from the second token on the step
    that computes token n + 2 is queued, fed on the device by token n + 1 (not yet read),
    before the host waits for token n (for its copy to the host, not for the steps queued
    after it: :class:`Pending`): the device always has the next step in hand, and the
    host's work per token (reading it, detokenizing, the event, the next launch) overlaps
    the device's forward instead of following it. The first token is reported at once. A
    step queued past a stop token or a cancellation is wasted, never reported."""
    stops = set(stop_ids)
    tokens: list[int] = []
    try:
        if cancelled():
            return Outcome(tokens, "cancelled")
        flight = [generation.start()]  # tokens queued and not yet read, in order
        while True:
            if _queue_more(generation, tokens, flight, cancelled):
                flight.append(generation.advance(flight[-1]))
            last = flight.pop(0)
            token = last.read()
            if token in stops:
                return Outcome(tokens, "stop")
            tokens.append(token)
            on_token(token)
            if len(tokens) >= generation.options.max_new_tokens:
                return Outcome(tokens, "length")
            if cancelled():
                return Outcome(tokens, "cancelled")
            if not flight:
                flight.append(generation.advance(last))
    finally:
        generation.release()


def _queue_more(
    generation: Generation,
    tokens: list[int],
    flight: list[Pending],
    cancelled: Callable[[], bool],
) -> bool:
    """Whether to queue a step before reading the oldest token in flight: ahead, after the
    first token, with one step in flight, while the cap allows one more."""
    wanted = len(tokens) + len(flight) < generation.options.max_new_tokens
    return generation.ahead and bool(tokens) and len(flight) == 1 and wanted and not cancelled()


def sample_on_device(
    logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None
) -> torch.Tensor:
    """A token drawn from ``softmax(logits / temperature)`` within the ``top_p`` nucleus,
    as a device tensor ``[1]`` (no host sync)."""
    probs = torch.softmax(logits / temperature, dim=-1).reshape(-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        keep = torch.cumsum(sorted_probs, 0) - sorted_probs < top_p
        sorted_probs = sorted_probs * keep
        choice = torch.multinomial(sorted_probs / sorted_probs.sum(), 1, generator=generator)
        return order[choice].view(1)
    return torch.multinomial(probs, 1, generator=generator).view(1)


def _as_ids(token: int | torch.Tensor, device: torch.device) -> torch.Tensor:
    if isinstance(token, int):
        return torch.tensor([[token]], device=device)
    return token.view(1, 1)


def _generator(seed: int | None, device: torch.device) -> torch.Generator | None:
    if seed is None:
        return None
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen
