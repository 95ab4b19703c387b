"""Fused int4 projections: one int4 matmul for an attention's q, k and v, one for an MLP's
gate and up.

A decode step multiplies one row by every weight, so each int4 kernel call is short and
the number of calls sets much of the step's time (bench/README.md, "GPU decode"). The
AWQ loader concatenates the checkpoint's q/k/v (and gate/up) tensors along the output
dimension into one :class:`~qwen_ui.engine.awq.Int4Linear` (AWQ packs 8 output columns
per int32 and every part's width is a multiple of 8, so the concatenation is exact) and
gives the module a forward that splits the result: seven int4 calls per decoder layer
become four. Only for the classes whose stock forward this module reproduces (Qwen2-VL's,
Qwen2.5-VL's and Qwen3-VL's text attention, the latter with its per-head q/k norms, and
their MLPs); ``tests/engine/test_fused.py`` pins the fused model's logits to the unfused
one's.

Under ``torch.compile`` (the static-cache decode step), the same forward gives a step's
attention (one query token) to :func:`step_attention`: on CUDA the split-KV Triton kernels
of :mod:`qwen_ui.engine.decode_attention` (one operator to Inductor) where they take the
shapes, else :func:`decode_attention`: the query heads of each K/V head are that head's
rows, scored in float32 by a product and sum that Inductor fuses with the softmax, then
one batched matmul with V. Both read the cache once. The stock path copies the
whole static cache once per query head first (``repeat_kv``, which transformers' SDPA
path calls when a mask is present: 0.62 of 4.03 ms of a 7B step on the H200,
``bench/profile_decode.py``); handing the packed rows to SDPA instead took its
memory-efficient kernel and was slower.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from qwen_ui.engine.awq_format import QUANT_SUFFIXES
from qwen_ui.engine.errors import UnsupportedModel

ATTENTION_CLASSES = ("Qwen2VLAttention", "Qwen2_5_VLAttention", "Qwen3VLTextAttention")
MLP_CLASSES = ("Qwen2MLP", "Qwen3VLTextMLP")
QKV = ("q_proj", "k_proj", "v_proj")
GATE_UP = ("gate_proj", "up_proj")


@dataclass(frozen=True)
class Group:
    """Sibling linears of ``parent`` that become one ``fused`` linear."""

    parent: str
    fused: str
    members: tuple[str, ...]

    def names(self) -> list[str]:
        return [f"{self.parent}.{m}" for m in self.members]


def plan(model: nn.Module, quantized: Mapping[str, str]) -> list[Group]:
    """The groups to fuse: attentions and MLPs of a known class whose members are all
    quantized (int4) linears."""
    groups = []
    for name, module in model.named_modules():
        kind = type(module).__name__
        if kind in ATTENTION_CLASSES:
            groups.append(Group(name, "qkv_proj", QKV))
        elif kind in MLP_CLASSES:
            groups.append(Group(name, "gate_up_proj", GATE_UP))
    return [g for g in groups if all(n in quantized for n in g.names())]


def fuse(
    model: nn.Module,
    tensors: Mapping[str, torch.Tensor],
    quantized: dict[str, str],
    make: Callable[..., nn.Module],
) -> list[Group]:
    """Build and install every group :func:`plan` finds; ``make(qweight, qzeros, scales,
    bias)`` builds the fused int4 layer. The members leave ``quantized`` (module name to
    checkpoint prefix), so the caller builds only the rest."""
    groups = plan(model, quantized)
    for g in groups:
        prefixes = [quantized.pop(name) for name in g.names()]
        widths = [int(tensors[f"{p}.scales"].shape[1]) for p in prefixes]
        install(model.get_submodule(g.parent), g, make(*concat_awq(tensors, prefixes)), widths)
    return groups


def concat_awq(
    tensors: Mapping[str, torch.Tensor], prefixes: list[str]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The AWQ ``qweight, qzeros, scales`` (and bias) of one linear that computes the
    prefixes' outputs side by side."""
    parts = [[tensors[f"{p}.{leaf}"] for p in prefixes] for leaf in QUANT_SUFFIXES]
    qweight, qzeros, scales = (torch.cat(p, dim=1) for p in parts)
    biases = [tensors.get(f"{p}.bias") for p in prefixes]
    present = [b for b in biases if b is not None]
    if present and len(present) != len(biases):
        raise UnsupportedModel(reason=f"some of {prefixes} have a bias and some do not")
    return qweight, qzeros, scales, torch.cat(present) if present else None


def install(parent: nn.Module, group: Group, fused: nn.Module, widths: list[int]) -> None:
    """Put ``fused`` on ``parent`` in place of ``group.members`` (widths: their outputs)."""
    for member in group.members:
        delattr(parent, member)
    parent.add_module(group.fused, fused)
    if group.fused == "qkv_proj":
        parent.forward = _attention_forward(parent, widths)  # type: ignore[method-assign]
    else:
        parent.forward = _mlp_forward(parent, widths)  # type: ignore[method-assign]


def _mlp_forward(mlp: Any, widths: list[int]) -> Callable[[torch.Tensor], torch.Tensor]:
    """``mlp.gated(gate, up)`` is the gated activation (a compiled one may replace it:
    :mod:`qwen_ui.engine.prefill`)."""
    mlp.gated = lambda gate, up: mlp.act_fn(gate) * up

    def forward(x: torch.Tensor) -> torch.Tensor:
        gate, up = mlp.gate_up_proj(x).split(widths, dim=-1)
        return mlp.down_proj(mlp.gated(gate, up))  # type: ignore[no-any-return]

    return forward


def _attention_forward(attn: Any, widths: list[int]) -> Callable[..., Any]:
    """The stock Qwen2(.5)-VL and Qwen3-VL text attention forward (transformers 5), with
    the three projections computed by one call; Qwen3-VL's per-head RMS norms of q and k
    (``q_norm``, ``k_norm``) apply before the rotary embedding, as in its stock forward."""
    family = sys.modules[type(attn).__module__]  # the functions the stock forward calls
    eager = family.eager_attention_forward
    rotary = family.apply_rotary_pos_emb  # a compiled one may replace it (prefill.py)
    # transformers 5.25 with `kernels` wraps it in a module, which assigning here would
    # register as a child module: keep a plain callable either way
    attn.rotary = rotary.forward if isinstance(rotary, nn.Module) else rotary
    functions = family.ALL_ATTENTION_FUNCTIONS
    q_norm, k_norm = _head_norms(attn)
    sliding_window = getattr(attn, "sliding_window", None)  # Qwen3-VL's has none

    def forward(
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cache: Any = None,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if cache is None:  # the deprecated name, as the stock forward accepts it
            cache = kwargs.pop("past_key_values", None)
        bsz, q_len, _ = hidden_states.size()
        q, k, v = (
            t.view(bsz, q_len, -1, attn.head_dim)
            for t in attn.qkv_proj(hidden_states).split(widths, dim=-1)
        )
        q, k, v = q_norm(q).transpose(1, 2), k_norm(k).transpose(1, 2), v.transpose(1, 2)
        assert position_embeddings is not None
        cos, sin = position_embeddings
        q, k = attn.rotary(q, k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v, attn.layer_idx, kwargs=kwargs)
        if q_len == 1 and attn.num_key_value_groups > 1 and torch.compiler.is_compiling():
            out = step_attention(q, k, v, attention_mask, attn.scaling)
            return attn.o_proj(out.reshape(bsz, q_len, -1)), None
        if packs(attn, q, attention_mask) and sliding_window is None:
            out = packed_decode_attention(q, k, v, attention_mask, attn.scaling)
            return attn.o_proj(out.reshape(bsz, q_len, -1)), None
        interface = functions.get_interface(attn.config._attn_implementation, eager)
        out, weights = interface(
            attn,
            q,
            k,
            v,
            attention_mask,
            dropout=0.0 if not attn.training else attn.attention_dropout,
            scaling=attn.scaling,
            sliding_window=sliding_window,
            position_ids=position_ids,
            **kwargs,
        )
        out = out.reshape(bsz, q_len, -1).contiguous()
        return attn.o_proj(out), weights

    return forward


def _head_norms(attn: Any) -> tuple[Callable[[torch.Tensor], torch.Tensor], ...]:
    """The attention's q and k head norms (Qwen3-VL), or the identity for both."""
    if hasattr(attn, "q_norm") and hasattr(attn, "k_norm"):
        return attn.q_norm, attn.k_norm
    return _same, _same


def _same(x: torch.Tensor) -> torch.Tensor:
    return x


def step_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float
) -> torch.Tensor:
    """A compiled decode step's attention (one query token, grouped K/V heads): the Triton
    kernels of :mod:`qwen_ui.engine.decode_attention` where they take the inputs (CUDA),
    else :func:`decode_attention`, as Inductor compiles it."""
    if q.is_cuda:
        from qwen_ui.engine import decode_attention as kernel  # imports Triton

        if kernel.fits(q, k, mask):
            return kernel.attention(q, k, v, mask, scale)
    return decode_attention(q, k, v, mask, scale)


def decode_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float
) -> torch.Tensor:
    """Attention of one query token (``q``: batch, heads, 1, dim) over grouped K/V heads
    (``k``/``v``: batch, kv heads, length, dim), scores and softmax in float32, without
    repeating K/V per query head. ``mask`` (batch, 1, 1, length or more; boolean = keep,
    else added) broadcasts over the heads. Returns batch, 1, heads, dim, as the attention
    interfaces do. Written for Inductor: eager, it builds a (rows x length x dim)
    product."""
    batch, heads, _, dim = q.shape
    rows = q.reshape(batch, k.shape[1], heads // k.shape[1], 1, dim).float() * scale
    scores = (rows * k.unsqueeze(2).float()).sum(-1)  # batch, kv heads, rows, length
    return attend(scores, v, mask)


def attend(scores: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """One query token's output from its float32 ``scores`` (batch, kv heads, query rows of
    each, length) over ``v`` (batch, kv heads, length, dim), ``mask`` as
    :func:`decode_attention` takes it; returns batch, 1, heads, dim."""
    batch, groups, rows, length = scores.shape
    if mask is not None:
        mask = mask[..., :length]
        scores = (
            scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
        )
    # the weights in V's dtype, as flash attention rounds them, through a batched matmul:
    # a product-and-sum over the length made Inductor one slow reduction (100 us a layer
    # at 4,352 cache slots on the H200)
    probs = torch.softmax(scores, dim=-1).to(v.dtype)
    out = torch.matmul(probs, v)  # batch, kv heads, rows, dim
    return out.reshape(batch, groups * rows, 1, v.shape[-1]).transpose(1, 2)


def packs(attn: Any, q: torch.Tensor, mask: torch.Tensor | None) -> bool:
    """Whether a step's attention goes to :func:`packed_decode_attention`: one query token,
    grouped K/V heads, SDPA, and a mask shared by all heads (or none)."""
    return (
        q.shape[2] == 1
        and attn.num_key_value_groups > 1
        and attn.config._attn_implementation == "sdpa"
        and (mask is None or (mask.dim() == 4 and mask.shape[1] == 1 and mask.shape[2] == 1))
    )


def packed_decode_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float
) -> torch.Tensor:
    """Attention of one query token (``q``: batch, heads, 1, dim) over grouped K/V heads
    through SDPA, the query heads of each K/V head passed as that head's query rows, so the
    cache is read once per K/V head; ``mask`` (batch, 1, 1, length) broadcasts over heads
    and rows. Transformers' SDPA path repeats the cache once per query head instead
    whenever a mask is given (``repeat_kv``; newer releases pack the same way), which an
    eager batched step pays per row over the whole slot length. Returns batch, 1, heads,
    dim, as the attention interfaces do."""
    batch, heads, _, dim = q.shape
    rows = q.reshape(batch, k.shape[1], heads // k.shape[1], dim)
    if mask is not None:
        mask = mask[..., : k.shape[-2]]
    out = torch.nn.functional.scaled_dot_product_attention(rows, k, v, attn_mask=mask, scale=scale)
    return out.reshape(batch, heads, 1, dim).transpose(1, 2)
