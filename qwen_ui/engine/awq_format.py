"""The AutoAWQ GEMM checkpoint format (4-bit, zero point), both directions, and its key names.

For a linear ``y = x @ W.T`` with ``W: [out, in]`` and group size ``g``:

* ``qweight``: int32 ``[in, out / 8]``; each int32 packs 8 output columns, nibble ``i``
  (bits ``4i .. 4i+3``) holding column ``ORDER[i]`` of its group of 8;
* ``qzeros``: int32 ``[in / g, out / 8]``, packed the same way;
* ``scales``: fp16 ``[in / g, out]``;
* dequantized: ``W.T[i, o] = (q[i, o] - z[i // g, o]) * s[i // g, o]``.

The official ``Qwen/Qwen2.5-VL-*-Instruct-AWQ`` repos store their tensors under transformers 4
key names (``visual.*``, ``model.*``, ``lm_head``); :func:`to_module_key` and
:func:`to_legacy_key` map them to and from transformers 5 module names.

The one definition of the format: the engine's int4 loader (:mod:`qwen_ui.engine.awq`), the
demo's reference loader, the offline quantizer in ``training/``, the benches and the tests
all pack, unpack and rename with it. Torch only.
"""

from __future__ import annotations

import re

import torch

BITS = 4
GROUP = 128  # the group size the demo model and the official repos use
PACK = 32 // BITS  # int4 values per int32
ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # nibble i of each int32 holds column ORDER[i]
REVERSE_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)  # column j sits in nibble REVERSE_ORDER[j]
MAX_Q = 2**BITS - 1
QUANT_SUFFIXES = ("qweight", "qzeros", "scales")  # an AWQ linear's tensors


def quantization_config(group: int = GROUP) -> dict[str, object]:
    """The ``quantization_config`` of the official ``Qwen/Qwen2.5-VL-*-Instruct-AWQ``
    repos (AutoAWQ GEMM, 4-bit, zero points, vision tower not converted)."""
    return {
        "bits": BITS,
        "group_size": group,
        "modules_to_not_convert": ["visual"],
        "quant_method": "awq",
        "version": "gemm",
        "zero_point": True,
    }


# published (transformers 4) key prefix -> transformers 5 module path, and back
_TO_MODULE = (
    (re.compile(r"^visual\."), "model.visual."),
    (re.compile(r"^model\.(?!visual\.|language_model\.)"), "model.language_model."),
)
_TO_LEGACY = (
    (re.compile(r"^model\.visual\."), "visual."),
    (re.compile(r"^model\.language_model\."), "model."),
)


def to_module_key(key: str) -> str:
    """A published checkpoint key -> the transformers 5 name (other keys unchanged)."""
    return _rename(key, _TO_MODULE)


def to_legacy_key(key: str) -> str:
    """A transformers 5 name -> the key the published checkpoints use."""
    return _rename(key, _TO_LEGACY)


def _rename(key: str, rules: tuple[tuple[re.Pattern[str], str], ...]) -> str:
    for pattern, repl in rules:
        if pattern.match(key):
            return pattern.sub(repl, key, count=1)
    return key


def quantize(weight: torch.Tensor, group: int = GROUP) -> tuple[torch.Tensor, ...]:
    """Asymmetric group quantization of ``weight [out, in]`` along ``in``.

    Returns ``q [out, in]`` (int32 in 0..15), ``scales [out, in/group]`` (float32 holding
    fp16 values, as the checkpoint stores them) and ``zeros [out, in/group]`` (int32), as
    AutoAWQ's ``pseudo_quantize_tensor``.
    """
    out_f, in_f = weight.shape
    w = weight.detach().float().reshape(out_f, in_f // group, group)
    hi, lo = w.amax(dim=-1), w.amin(dim=-1)
    scales = ((hi - lo).clamp(min=1e-5) / MAX_Q).half().float()
    zeros = (-torch.round(lo / scales)).clamp(0, MAX_Q)
    q = (torch.round(w / scales[..., None]) + zeros[..., None]).clamp(0, MAX_Q)
    return q.reshape(out_f, in_f).to(torch.int32), scales, zeros.to(torch.int32)


def dequantize_int(
    q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group: int = GROUP
) -> torch.Tensor:
    """:func:`quantize`'s output -> the float32 weight ``[out, in]`` it stands for."""
    out_f, in_f = q.shape
    w = (q.reshape(out_f, in_f // group, group) - zeros[..., None]).float() * scales[..., None]
    return w.reshape(out_f, in_f)


def pack_columns(values: torch.Tensor) -> torch.Tensor:
    """int ``[rows, cols]`` of 4-bit values -> int32 ``[rows, cols/8]`` in AWQ order."""
    rows, cols = values.shape
    v = values.to(torch.int64).reshape(rows, cols // PACK, PACK)
    packed = torch.zeros((rows, cols // PACK), dtype=torch.int64, device=values.device)
    for nibble, column in enumerate(ORDER):
        packed |= v[:, :, column] << (BITS * nibble)
    return (((packed + 2**31) % 2**32) - 2**31).to(torch.int32)  # two's complement wrap


def unpack_columns(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_columns`: int32 ``[rows, cols/8]`` -> int32 ``[rows, cols]``
    of values 0..15 in natural column order (on ``packed``'s device)."""
    shifts = torch.arange(0, 32, BITS, dtype=torch.int32, device=packed.device)
    nibbles = (packed.to(torch.int32).unsqueeze(-1) >> shifts) & MAX_Q  # [r, c/8, 8]
    natural: torch.Tensor = nibbles[..., list(REVERSE_ORDER)]
    return natural.reshape(packed.shape[0], -1)


def pack_linear(
    q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor
) -> dict[str, torch.Tensor]:
    """:func:`quantize`'s output -> the AutoAWQ GEMM tensors of one linear layer."""
    return {
        "qweight": pack_columns(q.t().contiguous()),
        "qzeros": pack_columns(zeros.t().contiguous()),
        "scales": scales.t().contiguous().to(torch.float16),
    }


def dequantize(
    qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, group: int = GROUP
) -> torch.Tensor:
    """The float32 weight ``[out, in]`` an AutoAWQ GEMM triple stands for (the reference)."""
    q = unpack_columns(qweight).float()  # [in, out]
    z = unpack_columns(qzeros).float().repeat_interleave(group, dim=0)
    s = scales.float().repeat_interleave(group, dim=0)
    return ((q - z) * s).t().contiguous()
