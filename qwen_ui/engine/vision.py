"""A faster vision-tower attention: one SDPA call per group of equal-length windows.

Without flash-attn, transformers' Qwen2-VL, Qwen2.5-VL and Qwen3-VL vision attention loops
over the windows in Python (one SDPA call per 8x8-patch window: about 60 for a 1024x768
image, in each of the window-attention layers) and waits for the device in every layer
(``lengths.tolist()``). :func:`install` swaps each block's attention for one call per
group of equal-length windows (a full window, the right and bottom edges, the corner:
at most four per image size), each over a ``[windows, heads, length, dim]`` batch with no
padding and no mask; the grouping is built once per forward for each distinct
``cu_seqlens`` tensor (one host sync instead of one per layer). Same maths as the stock
loop: ``tests/engine/test_vision.py`` compares the towers' outputs;
``bench/bench_vision.py`` measures the two in one process.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

Rotary = Callable[..., tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class Layout:
    """The chunks (windows or images) of one ``cu_seqlens``, grouped by length: for each
    distinct length, a ``[chunks, length]`` tensor of token positions. One attention call
    per group, no padding and no mask (the fast kernels apply)."""

    groups: tuple[torch.Tensor, ...]

    @classmethod
    def of(cls, cu_seqlens: torch.Tensor) -> Layout:
        bounds = cu_seqlens.tolist()  # the one host sync for this layout
        by_length: dict[int, list[int]] = {}
        for start, end in itertools.pairwise(bounds):
            if end > start:
                by_length.setdefault(end - start, []).append(start)
        device = cu_seqlens.device
        groups = tuple(
            torch.tensor(starts, device=device)[:, None] + torch.arange(n, device=device)
            for n, starts in sorted(by_length.items())
        )
        return cls(groups)

    def to(self, device: torch.device) -> Layout:
        """This layout on ``device`` (built on the host, where ``cu_seqlens`` costs no sync:
        the training data workers build each batch's)."""
        return Layout(tuple(g.to(device, non_blocking=True) for g in self.groups))


class Layouts:
    """Layouts by ``cu_seqlens`` tensor; holds the last few tensors so ids stay unique."""

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self._items: list[tuple[torch.Tensor, Layout]] = []

    def get(self, cu_seqlens: torch.Tensor) -> Layout:
        for tensor, layout in self._items:
            if tensor is cu_seqlens:
                return layout
        layout = Layout.of(cu_seqlens)
        self.put(cu_seqlens, layout)
        return layout

    def put(self, cu_seqlens: torch.Tensor, layout: Layout) -> None:
        """Use ``layout`` (built beforehand) for the tensor ``cu_seqlens``."""
        self._items = [*self._items[-(self.size - 1) :], (cu_seqlens, layout)]


def batched_attention(
    module: Any,
    hidden_states: torch.Tensor,
    layout: Layout,
    position_embeddings: tuple[torch.Tensor, torch.Tensor],
    rotary: Rotary,
) -> torch.Tensor:
    """One block's attention, one call per group of equal-length chunks (the stock
    module's weights and maths; ``rotary`` is its model file's
    ``apply_rotary_pos_emb_vision``)."""
    seq, heads = hidden_states.shape[0], module.num_heads
    qkv = module.qkv(hidden_states).reshape(seq, 3, heads, -1).permute(1, 0, 2, 3)
    q, k = rotary(qkv[0], qkv[1], *position_embeddings)
    v = qkv[2]
    out = torch.empty_like(v)
    for index in layout.groups:  # [chunks, length] → [chunks, heads, length, dim]
        q_, k_, v_ = (t[index].transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q_, k_, v_, scale=module.scaling)
        out[index] = attended.transpose(1, 2)
    return module.proj(out.reshape(seq, -1))  # type: ignore[no-any-return]


def _forward(module: Any, layouts: Layouts) -> Callable[..., torch.Tensor]:
    rotary = sys.modules[type(module).__module__].apply_rotary_pos_emb_vision

    def forward(
        hidden_states: torch.Tensor,
        cu_seqlens: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        **_: Any,
    ) -> torch.Tensor:
        layout = layouts.get(cu_seqlens)
        return batched_attention(module, hidden_states, layout, position_embeddings, rotary)

    return forward


def vision_blocks(model: Any) -> list[Any]:
    """The vision tower's blocks (``model.model.visual.blocks``), empty when absent."""
    visual = getattr(getattr(model, "model", None), "visual", None)
    return list(getattr(visual, "blocks", []))


def install(model: Any, layouts: Layouts | None = None) -> int:
    """Swap every vision block's attention for :func:`batched_attention`; returns how
    many were swapped. None when the attention asks for flash attention: transformers
    then makes one varlen call already (the same test the stock module makes).
    ``layouts``: where the blocks look up each ``cu_seqlens`` tensor's layout (a caller
    that builds them ahead puts them there; by default each is built on first use)."""
    from transformers.utils.generic import is_flash_attention_requested

    blocks = vision_blocks(model)
    if not blocks or is_flash_attention_requested(blocks[0].attn.config):
        return 0
    layouts = layouts if layouts is not None else Layouts()
    for block in blocks:
        block.attn.forward = _forward(block.attn, layouts)
    return len(blocks)


def uninstall(model: Any) -> None:
    """Back to the stock attention."""
    for block in vision_blocks(model):
        block.attn.__dict__.pop("forward", None)
