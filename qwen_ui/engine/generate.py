"""The decoding loop: prefill once, then one forward call per token.

Everything that changes during an answer (the KV cache, the multimodal rope offset, the
sampling generator) lives in :class:`Generation`, which belongs to one request. The shared
model object is only called, never written to: positions are computed per request with
``get_rope_index`` and passed explicitly, so ``model.model.rope_deltas`` is never read.

``Generation.launch`` and ``Generation.collect`` are the only per-token work (one forward
call, then the choice of the next token); a static KV cache or a compiled step can replace
them without touching the loop.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from transformers import PreTrainedModel, StaticCache
from transformers.modeling_outputs import BaseModelOutputWithPooling

DecodeMode = Literal["eager", "static"]
CACHE_BUCKET = 256  # static caches come in lengths that are multiples of this


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
    ) -> None:
        """``decode_mode="static"`` decodes into a fixed-length :class:`StaticCache` (from
        ``pool`` when given, else a fresh one for this request) with the step's inputs in
        fixed tensors, so ``step_forward`` may be a compiled/graph-captured ``model.forward``
        (see :func:`compiled_step`)."""
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
        self.cache_len = 0
        self._ids = torch.zeros((1, 1), dtype=torch.long, device=self.device)
        self._pos = torch.zeros((3, 1, 1), dtype=torch.long, device=self.device)
        self._pending: torch.Tensor | None = None  # logits of a launched step

    @torch.inference_mode()
    def prefill(self) -> int:
        positions, self.rope_delta = prompt_positions(self.model, self.prompt)
        kwargs: dict[str, Any] = {}
        if self.prompt.image_features:
            kwargs["mm_encoder_outputs"] = {"image": self.prompt.encoder_outputs(self.device)}
            kwargs["image_grid_thw"] = self.prompt.image_grid_thw
            kwargs["mm_token_type_ids"] = self.prompt.mm_token_type_ids
        if self.decode_mode == "static":
            self.cache_len = cache_length(self.prompt.length + self.options.max_new_tokens)
            self.cache = (
                self.pool.take(self.cache_len)
                if self.pool is not None
                else StaticCache(config=self.model.config, max_cache_len=self.cache_len)
            )
            kwargs["cache"] = self.cache
        out = self.model(
            input_ids=self.prompt.input_ids,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **kwargs,
        )
        self.cache = out.cache
        self.position = self.prompt.length
        return self.choose(out.logits[:, -1, :])

    @torch.inference_mode()
    def launch(self, token: int) -> None:
        """Start the forward step that follows ``token``; on CUDA the device runs it while
        the host goes on (:meth:`collect` takes its token)."""
        if self.decode_mode == "static":
            self._ids.fill_(token)
            self._pos.fill_(self.position + self.rope_delta)
            out = self.step_forward(
                input_ids=self._ids, position_ids=self._pos, cache=self.cache, use_cache=True
            )
        else:
            ids = torch.tensor([[token]], device=self.device)
            pos = torch.full((3, 1, 1), self.position + self.rope_delta, device=self.device)
            out = self.model(input_ids=ids, position_ids=pos, cache=self.cache, use_cache=True)
            self.cache = out.cache
        self.position += 1
        self._pending = out.logits[:, -1, :]

    @torch.inference_mode()
    def collect(self) -> int:
        """The token of the step :meth:`launch` started (waits for the device)."""
        logits, self._pending = self._pending, None
        assert logits is not None, "collect() without launch()"
        return self.choose(logits)

    def step(self, token: int) -> int:
        self.launch(token)
        return self.collect()

    def choose(self, logits: torch.Tensor) -> int:
        if self.options.greedy:
            return int(torch.argmax(logits, dim=-1).item())
        return sample(logits.float(), self.options.temperature, self.options.top_p, self.generator)

    def release(self) -> None:
        if self.pool is not None and self.cache is not None and self.decode_mode == "static":
            self.pool.give_back(self.cache_len, self.cache)
        self.cache = None


def compiled_step(model: PreTrainedModel) -> Callable[..., Any]:
    """``model.forward`` compiled with CUDA graphs (``mode="reduce-overhead"``) for the
    static decode step. CUDA only: the caller (the worker) keeps one per loaded model and
    only asks for it when compiling is switched on."""
    return torch.compile(model.forward, mode="reduce-overhead", dynamic=False)  # type: ignore[no-any-return]


def run(
    generation: Generation,
    stop_ids: Sequence[int],
    on_token: Callable[[int], None],
    cancelled: Callable[[], bool],
) -> Outcome:
    """Prefill and decode until a stop token, the token cap, or cancellation. From the
    second token on, the next step is launched before ``on_token`` reports the current
    token, so the host's work per token (detokenizing, the event) overlaps the device's
    forward instead of adding to it; the first is reported at once."""
    stops = set(stop_ids)
    tokens: list[int] = []
    try:
        if cancelled():
            return Outcome(tokens, "cancelled")
        token = generation.prefill()
        while True:
            if token in stops:
                return Outcome(tokens, "stop")
            tokens.append(token)
            first = len(tokens) == 1
            if first:  # reported at once: the time to first token waits for no launch
                on_token(token)
            more = len(tokens) < generation.options.max_new_tokens
            launched = more and not cancelled()
            if launched:
                generation.launch(token)
            if not first:
                on_token(token)
            if not more:
                return Outcome(tokens, "length")
            if not launched or cancelled():
                return Outcome(tokens, "cancelled")
            token = generation.collect()
    finally:
        generation.release()


def sample(
    logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None
) -> int:
    probs = torch.softmax(logits / temperature, dim=-1).reshape(-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        keep = torch.cumsum(sorted_probs, 0) - sorted_probs < top_p
        sorted_probs = sorted_probs * keep
        choice = torch.multinomial(sorted_probs / sorted_probs.sum(), 1, generator=generator)
        return int(order[choice].item())
    return int(torch.multinomial(probs, 1, generator=generator).item())


def _generator(seed: int | None, device: torch.device) -> torch.Generator | None:
    if seed is None:
        return None
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen
