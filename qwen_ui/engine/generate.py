"""The decoding loop: prefill once, then one forward call per token.

Everything that changes during an answer (the KV cache, the multimodal rope offset, the
sampling generator) lives in :class:`Generation`, which belongs to one request. The shared
model object is only called, never written to: positions are computed per request with
``get_rope_index`` and passed explicitly, so ``model.model.rope_deltas`` is never read.

``Generation.step`` is the only per-token work (one forward call plus the choice of the next
token); a static KV cache or a compiled step can replace it without touching the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPooling


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

    def __init__(self, model: PreTrainedModel, prompt: Prompt, options: SamplingOptions) -> None:
        self.model = model
        self.prompt = prompt
        self.options = options
        self.device = prompt.input_ids.device
        self.cache: Any = None
        self.rope_delta = 0
        self.position = 0  # sequence position of the next token (before the rope offset)
        self.generator = _generator(options.seed, self.device)

    @torch.inference_mode()
    def prefill(self) -> int:
        positions, self.rope_delta = prompt_positions(self.model, self.prompt)
        kwargs: dict[str, Any] = {}
        if self.prompt.image_features:
            kwargs["mm_encoder_outputs"] = {"image": self.prompt.encoder_outputs(self.device)}
            kwargs["image_grid_thw"] = self.prompt.image_grid_thw
            kwargs["mm_token_type_ids"] = self.prompt.mm_token_type_ids
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
    def step(self, token: int) -> int:
        ids = torch.tensor([[token]], device=self.device)
        pos = torch.full((3, 1, 1), self.position + self.rope_delta, device=self.device)
        out = self.model(input_ids=ids, position_ids=pos, cache=self.cache, use_cache=True)
        self.cache = out.cache
        self.position += 1
        return self.choose(out.logits[:, -1, :])

    def choose(self, logits: torch.Tensor) -> int:
        if self.options.greedy:
            return int(torch.argmax(logits, dim=-1).item())
        return sample(logits.float(), self.options.temperature, self.options.top_p, self.generator)

    def release(self) -> None:
        self.cache = None


def run(
    generation: Generation,
    stop_ids: Sequence[int],
    on_token: Callable[[int], None],
    cancelled: Callable[[], bool],
) -> Outcome:
    """Prefill and decode until a stop token, the token cap, or cancellation."""
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
            on_token(token)
            if len(tokens) >= generation.options.max_new_tokens:
                return Outcome(tokens, "length")
            if cancelled():
                return Outcome(tokens, "cancelled")
            token = generation.step(token)
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
