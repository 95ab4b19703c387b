"""Compiled pieces of a long prefill on CUDA.

A prefill runs the language model eagerly over the whole prompt (a thousand rows for one
1024x768 image), so every elementwise step is a full pass over the activations and a
kernel launch: on the 7B architecture an RMS norm is seven kernels, a rotary embedding
a dozen, an MLP's gated activation two passes over its widest activations, and the
dequantize of an int4 weight a dozen passes (bench/README.md, "Where time to first
token goes"). Here each becomes one Inductor kernel. They compile on first use, once per
distinct shape class (the prompt's length is dynamic). CUDA only; the loader calls
:func:`compile_prefill` when a long prefill dequantizes (``prefill_dequant_rows``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from qwen_ui.engine.awq import (
    DequantizePacked,
    Int4Linear,
    dequantize_for_kernel,
    dequantize_tinygemm,
)

log = logging.getLogger(__name__)

SILU = ("SiLU", "SiLUActivation")  # torch's and transformers' (ACT2FN["silu"])
# Inductor computes a fused chain in float32 and rounds once; eager bf16 rounds after every
# op. Rounding where eager does keeps the prefill's logits nearer the eager model's (while
# they rounded once, a near-tied first token of a demo question flipped on the H200).
EAGER_ROUNDING: dict[str, str | int | bool | Callable[..., Any]] = {"emulate_precision_casts": True}


def rms_norm(hidden: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen2's RMS norm, the stock module's arithmetic: float32 inside, the weight applied
    to the result cast back to the input's dtype."""
    dtype = hidden.dtype
    x = hidden.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


def silu_gated(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up``, the gated activation of a Qwen2 MLP."""
    return nn.functional.silu(gate) * up


def compile_prefill(model: nn.Module) -> None:
    """Install the compiled dequantize on every int4 layer that dequantizes for long
    prefills; and in the language model, compiled norms, rotary embeddings and gated
    activations for inputs of more than one row (a decode step keeps the eager ones: one
    row is a handful of small kernels, which the compiled decode step fuses anyway)."""
    _dequantize(model)
    norm = torch.compile(rms_norm, dynamic=True, options=EAGER_ROUNDING)
    gated = torch.compile(silu_gated, dynamic=True, options=EAGER_ROUNDING)
    rotaries: dict[Callable[..., Any], Callable[..., Any]] = {}
    counts = {"norms": 0, "rotary": 0, "gated": 0}
    module: Any
    for module in language_model(model).modules():
        if type(module).__name__.endswith("RMSNorm") and hasattr(module, "variance_epsilon"):
            module.forward = _norm_forward(module, norm)  # type: ignore[method-assign]
            counts["norms"] += 1
        if hasattr(module, "rotary"):
            eager = module.rotary
            if eager not in rotaries:
                rotaries[eager] = torch.compile(eager, dynamic=True, options=EAGER_ROUNDING)
            module.rotary = _rows(rotaries[eager], eager)
            counts["rotary"] += 1
        if hasattr(module, "gated") and type(module.act_fn).__name__ in SILU:
            module.gated = _rows(gated, module.gated)
            counts["gated"] += 1
    log.info("prefill compiled: %s", counts)


def _rows(compiled: Callable[..., Any], eager: Callable[..., Any]) -> Callable[..., Any]:
    """``compiled`` for inputs of more than one row (the first argument's next-to-last
    dimension), else ``eager``."""

    def call(first: torch.Tensor, *rest: Any) -> Any:
        return (compiled if first.shape[-2] > 1 else eager)(first, *rest)

    return call


def _dequantize(model: nn.Module) -> None:
    """One compiled dequantize for every int4 layer: Inductor fuses the unpacking and
    scaling into one kernel per layer shape. Layers that read the CUDA kernel's packed
    weight take the Triton unpacking instead wherever it gives the eager function's weight
    bit for bit (checked once per layer shape here)."""
    fused = torch.compile(dequantize_for_kernel, dynamic=False, options=EAGER_ROUNDING)
    fused_packed = torch.compile(dequantize_tinygemm, dynamic=False, options=EAGER_ROUNDING)
    checked: dict[tuple[int, ...], bool] = {}
    for module in model.modules():
        if isinstance(module, Int4Linear) and module.prefill_rows:
            module.dequantize = fused
            module.dequantize_packed = fused_packed
            if hasattr(module, "tile_gather") and _unpacks_alike(module, checked):
                module.dequantize_packed = _triton_unpack()


def _triton_unpack() -> DequantizePacked:
    # imported here: Triton comes with CUDA builds of torch, which a CPU install may lack
    from qwen_ui.engine.tinygemm_unpack import unpack_dequantize

    return unpack_dequantize


def _unpacks_alike(layer: Int4Linear, checked: dict[tuple[int, ...], bool]) -> bool:
    """Whether :func:`unpack_dequantize` gives :func:`dequantize_tinygemm`'s weight for
    this layer's shape (the first layer of each shape decides)."""
    shape = (*layer.packed.shape, layer.group_size)
    if shape not in checked:
        args = (layer.packed, layer.tile_gather, layer.scales_and_zeros, layer.group_size)
        try:
            checked[shape] = torch.equal(
                _triton_unpack()(*args, torch.bfloat16),
                dequantize_tinygemm(*args, torch.bfloat16),
            )
        except Exception:  # any failure means: keep Inductor's kernel
            log.exception("the Triton unpacking failed for %s", shape)
            checked[shape] = False
        if not checked[shape]:
            log.warning("int4 unpacking: Inductor's kernel kept for packed shape %s", shape)
    return checked[shape]


def language_model(model: nn.Module) -> nn.Module:
    inner = getattr(model, "model", model)
    return getattr(inner, "language_model", inner)  # type: ignore[no-any-return]


def _norm_forward(
    module: Any, norm: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]
) -> Callable[[torch.Tensor], torch.Tensor]:
    eager = type(module).forward

    def forward(hidden: torch.Tensor) -> torch.Tensor:
        if sequence_rows(hidden) > 1:
            return norm(hidden, module.weight, module.variance_epsilon)
        return eager(module, hidden)  # type: ignore[no-any-return]

    return forward


def sequence_rows(hidden: torch.Tensor) -> int:
    """The positions a norm's input covers: ``[batch, rows, hidden]``, or Qwen3-VL's per-head
    q/k norms' ``[batch, rows, heads, head_dim]`` (a decode step's one row has many heads)."""
    return int(hidden.shape[-3] if hidden.dim() >= 4 else hidden.shape[-2])
