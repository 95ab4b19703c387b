"""The newcomers' prefills of continuous batching (:mod:`qwen_ui.engine.batching`).

Newcomers that meet at a step boundary are prefilled together: one pass of the language
model over their prompts' embeddings (image features scattered in), padded on the right
to the longest (attention is causal: a row never sees its padding), with each row's own
rope positions; the logits of each row's last position come from the language model's
head. A :class:`Prefill` may take that pass in chunks of columns, one chunk per step
boundary, so that the running sequences stall for at most one chunk; the chunks extend a
dynamic cache as the prompt goes. A prompt with Qwen3-VL's deepstack features goes alone
through the model's own forward (:func:`prefill_one`), which adds them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from transformers import PreTrainedModel

from qwen_ui.engine.generate import Prompt, prompt_positions
from qwen_ui.engine.prefill import language_model

if TYPE_CHECKING:
    from qwen_ui.engine.batching import Sequence

KV = list[tuple[torch.Tensor, torch.Tensor]]  # one (keys, values) per decoder layer


class Prefill:
    """Several prompts' padded pass, ``advance`` by ``advance`` (sets each sequence's
    rope offset); then :attr:`kv` holds their keys and values and :meth:`logits` their
    last positions' logits ``[n, vocab]``."""

    def __init__(self, model: PreTrainedModel, seqs: list[Sequence]) -> None:
        self.model = model
        self.seqs = seqs
        self.language: Any = language_model(model)
        self.lengths = [s.prompt.length for s in seqs]
        columns = max(self.lengths)
        device = model.device
        self.positions = torch.zeros((3, len(seqs), columns), dtype=torch.long, device=device)
        embeds = []
        for row, seq in enumerate(seqs):
            emb = prompt_embeddings(self.language, seq.prompt)[0]
            embeds.append(torch.nn.functional.pad(emb, (0, 0, 0, columns - emb.shape[0])))
            pos, seq.rope_delta = prompt_positions(model, seq.prompt)
            self.positions[:, row, : seq.prompt.length] = pos[:, 0]
        self.embeds = torch.stack(embeds)
        self.cache: Any = None
        self.done = 0  # columns passed
        self.last: list[torch.Tensor | None] = [None] * len(seqs)

    @property
    def columns(self) -> int:
        return int(self.embeds.shape[1])

    @property
    def complete(self) -> bool:
        return self.done >= self.columns

    def advance(self, columns: int) -> None:
        """The pass over the next ``columns`` columns (all that are left if 0)."""
        start = self.done
        end = self.columns if columns <= 0 else min(self.columns, start + columns)
        out = self.language(
            inputs_embeds=self.embeds[:, start:end],
            position_ids=self.positions[:, :, start:end],
            cache=self.cache,
            use_cache=True,
        )
        self.cache = out.cache
        for row, length in enumerate(self.lengths):
            if start <= length - 1 < end:
                self.last[row] = out.last_hidden_state[row, length - 1 - start]
        self.done = end

    @property
    def kv(self) -> KV:
        return layers_of(self.cache)

    def logits(self) -> torch.Tensor:
        hidden = torch.stack([h for h in self.last if h is not None])
        return self.model.lm_head(hidden)  # type: ignore[no-any-return]


def prefill_one(model: PreTrainedModel, seq: Sequence) -> tuple[KV, torch.Tensor]:
    """One prompt through the model's forward (as :class:`Generation` prefills): its
    keys and values per layer, and its last position's logits ``[1, vocab]``."""
    prompt = seq.prompt
    positions, seq.rope_delta = prompt_positions(model, prompt)
    kwargs: dict[str, Any] = {}
    if prompt.image_features:
        kwargs["mm_encoder_outputs"] = {"image": prompt.encoder_outputs(model.device)}
        kwargs["image_grid_thw"] = prompt.image_grid_thw
        kwargs["mm_token_type_ids"] = prompt.mm_token_type_ids
    out = model(
        input_ids=prompt.input_ids,
        position_ids=positions,
        use_cache=True,
        logits_to_keep=1,
        **kwargs,
    )
    return layers_of(out.cache), out.logits[:, -1, :]


def prompt_embeddings(language: Any, prompt: Prompt) -> torch.Tensor:
    """The prompt's input embeddings ``[1, L, hidden]``: the token table's rows, with the
    image features in place of the image tokens (as the model's own forward scatters them)."""
    embeds = language.embed_tokens(prompt.input_ids)
    if not prompt.image_features:
        return embeds  # type: ignore[no-any-return]
    features = torch.cat(prompt.image_features).to(embeds.device, embeds.dtype)
    image = (prompt.mm_token_type_ids == 1).to(embeds.device).unsqueeze(-1)
    return embeds.masked_scatter(image, features)  # type: ignore[no-any-return]


def layers_of(cache: Any) -> KV:
    return [(layer.keys, layer.values) for layer in cache.layers]
