"""A faster vision tower: one SDPA call per group of equal-length windows, and MLP widths
padded to whole 16-byte rows.

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

Qwen2.5-VL's vision MLPs are 3,420 wide: a row of 3,420 bf16 values is not a multiple of
16 bytes, so cuBLAS runs their three matmuls on its 2-byte-aligned kernels, at about a
third of the aligned ones' pace (the two were 111 of the 8-image tower's 255 ms on the
H200). :func:`pad_mlps` widens each MLP to the next multiple of 8 with zero weights: the
new hidden units get zero input weights and bias, and the down projection gives them zero
weight, so the output is the stock one's sum with a few more zero terms. On CUDA the
rotary embedding is :mod:`~qwen_ui.engine.vision_rope`'s kernel (the same bits).
"""

from __future__ import annotations

import functools
import itertools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

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
    stock = sys.modules[type(module).__module__].apply_rotary_pos_emb_vision

    def forward(
        hidden_states: torch.Tensor,
        cu_seqlens: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        **_: Any,
    ) -> torch.Tensor:
        layout = layouts.get(cu_seqlens)
        rotary = _kernel_rotary() if kernel_rotary_applies(hidden_states) else stock
        return batched_attention(module, hidden_states, layout, position_embeddings, rotary)

    return forward


def kernel_rotary_applies(hidden_states: torch.Tensor) -> bool:
    """Whether the rotary kernel serves this call: on CUDA, without autograd (the kernel
    has no backward; training, e.g. ``training/train.py``, keeps the stock function)."""
    return hidden_states.is_cuda and not torch.is_grad_enabled()


@functools.cache
def _kernel_rotary() -> Rotary:
    """The stock rotary's maths in one Triton kernel per tensor (imported on first use:
    Triton comes with CUDA builds of torch)."""
    from qwen_ui.engine import vision_rope

    return vision_rope.rotate


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


ALIGN = 8  # bf16 values in 16 bytes: cuBLAS's fast kernels want rows of whole 16 bytes
# each MLP class's (input projections, output projection), by attribute name
MLP_PARTS = (
    (("gate_proj", "up_proj"), "down_proj"),
    (("fc1",), "fc2"),
    (("linear_fc1",), "linear_fc2"),
)


def pad_mlps(model: Any) -> int:
    """Widen each vision block's MLP to a multiple of :data:`ALIGN` hidden units (zero
    weights, so the block's output stays the stock one's); returns how many were
    widened."""
    widened = 0
    for block in vision_blocks(model):
        widened += _pad_mlp(block.mlp)
    return widened


def _pad_mlp(mlp: nn.Module) -> int:
    for inputs, output in MLP_PARTS:
        if not all(isinstance(getattr(mlp, n, None), nn.Linear) for n in (*inputs, output)):
            continue
        extra = -getattr(mlp, output).in_features % ALIGN
        if not extra:
            return 0
        for name in inputs:
            setattr(mlp, name, _more_outputs(getattr(mlp, name), extra))
        setattr(mlp, output, _more_inputs(getattr(mlp, output), extra))
        return 1
    return 0


def _more_outputs(linear: nn.Linear, extra: int) -> nn.Linear:
    """``linear`` with ``extra`` more outputs, each of zero weight and bias."""
    weight = F.pad(linear.weight.detach(), (0, 0, 0, extra))
    bias = None if linear.bias is None else F.pad(linear.bias.detach(), (0, extra))
    return _linear(weight, bias)


def _more_inputs(linear: nn.Linear, extra: int) -> nn.Linear:
    """``linear`` taking ``extra`` more inputs, each of zero weight."""
    weight = F.pad(linear.weight.detach(), (0, extra))
    bias = None if linear.bias is None else linear.bias.detach()
    return _linear(weight, bias)


def _linear(weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Linear:
    out_features, in_features = weight.shape
    linear = nn.Linear(
        in_features, out_features, bias=bias is not None, device="meta", dtype=weight.dtype
    )
    linear.weight = nn.Parameter(weight, requires_grad=False)
    if bias is not None:
        linear.bias = nn.Parameter(bias, requires_grad=False)
    return linear
