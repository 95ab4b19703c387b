"""Qwen3-VL's DeepStack features as a dense addition, so a recorded prefill can take them.

Qwen3-VL's language model adds visual features from a few vision-tower layers
(``vision_config.deepstack_visual_indexes``, three in the published models) to the hidden
states at the image positions, after each of its first decoder layers, during the prefill
only. transformers does it by boolean-mask indexing (``hidden[mask, :] + features``,
``Qwen3VLTextModel._deepstack_process``): the number of rows depends on the data, so a CUDA
graph cannot record it (the indexing asks the host for the count). Here each layer's
features are scattered once into a dense ``[1, rows, hidden]`` tensor that is zero at text
and padding rows, and the addition becomes ``hidden + dense``: the same sums at the image
positions, the hidden states unchanged elsewhere (``x + 0 == x``), one fixed-shape kernel
per layer. :mod:`qwen_ui.engine.prefill_graphs` uses it; the eager prefill keeps the stock
path (it passes the mask).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from qwen_ui.engine.generate import Prompt

DeepstackProcess = Callable[[torch.Tensor, torch.Tensor | None, torch.Tensor], torch.Tensor]


def deepstack_layers(model: Any) -> int:
    """How many decoder layers get DeepStack features (0: not a DeepStack model)."""
    vision = getattr(model.config, "vision_config", None)
    return len(getattr(vision, "deepstack_visual_indexes", None) or [])


def install_dense_deepstack(language: nn.Module) -> None:
    """Let ``language`` (a ``Qwen3VLTextModel``) take dense DeepStack features: called
    with ``visual_pos_masks=None``, each layer's features are added to every row; with a
    mask, the stock indexing runs as before."""
    if getattr(language, "_dense_deepstack", False):
        return
    stock: DeepstackProcess = language._deepstack_process  # type: ignore[assignment]

    def process(
        hidden: torch.Tensor, masks: torch.Tensor | None, features: torch.Tensor
    ) -> torch.Tensor:
        if masks is None:
            return hidden + features.to(hidden.dtype)
        return stock(hidden, masks, features)

    language._deepstack_process = process  # type: ignore[assignment]
    language._dense_deepstack = True  # type: ignore[assignment]


def dense_buffer(layers: int, rows: int, like: torch.Tensor) -> torch.Tensor:
    """Zeros ``[layers, 1, rows, hidden]`` in ``like``'s dtype and device (``like``: the token
    embedding table)."""
    return torch.zeros((layers, 1, rows, like.shape[1]), dtype=like.dtype, device=like.device)


def scatter_features(prompt: Prompt, dense: torch.Tensor) -> None:
    """Write ``prompt``'s DeepStack features into ``dense`` (see :func:`dense_buffer`) at its
    image positions, in prompt order, and zero every other row."""
    dense.zero_()
    if not prompt.deepstack:
        return
    length = prompt.length
    image = (prompt.mm_token_type_ids[0] == 1).to(dense.device)  # [length]
    features = torch.cat(prompt.deepstack, dim=1).to(dense.device, dense.dtype)
    if features.shape[0] != dense.shape[0]:
        raise ValueError(f"{features.shape[0]} DeepStack layers, the model has {dense.shape[0]}")
    rows = image.nonzero().squeeze(-1)
    dense[:, 0, :length].index_copy_(1, rows, features)


def layer_features(dense: torch.Tensor, rows: int) -> list[torch.Tensor]:
    """The language model's ``deepstack_visual_embeds`` for a pass over ``rows`` rows."""
    return [dense[layer, :, :rows] for layer in range(dense.shape[0])]
