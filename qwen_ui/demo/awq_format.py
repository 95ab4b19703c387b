"""The AutoAWQ GEMM checkpoint format (4-bit, group 128, zero point), both directions.

``qweight``: int32 ``[in, out/8]``, eight 4-bit values per int32 along the output axis in
AWQ's interleaved order (nibble ``i`` holds column ``ORDER[i]`` of each group of eight);
``qzeros``: int32 ``[in/group, out/8]`` packed the same way; ``scales``: fp16
``[in/group, out]``. Weight ``W[out, in] = (q[in, out] - z[in/group, out]) * s[in/group, out]``
transposed. Also the key names of the official ``Qwen/Qwen2.5-VL-*-Instruct-AWQ`` repos
(``visual.*``, ``model.*``, ``lm_head``) and their mapping to transformers 5 module names.

Small and dependency-free (torch only): the offline quantizer packs with it, and the
reference loader (:mod:`qwen_ui.demo.awq_ref`) unpacks with it.
"""

from __future__ import annotations

import re

import torch

BITS = 4
GROUP = 128
PACK = 32 // BITS
ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # nibble i of each int32 holds column ORDER[i]
MAX_Q = 2**BITS - 1
QUANT_SUFFIXES = ("qweight", "qzeros", "scales")

# legacy (official repo) key prefix -> transformers 5 module path


def quantization_config() -> dict[str, object]:
    """The ``quantization_config`` of the official ``Qwen/Qwen2.5-VL-*-Instruct-AWQ``
    repos (AutoAWQ GEMM, 4-bit, group 128, zero points, vision tower not converted)."""
    return {
        "bits": BITS,
        "group_size": GROUP,
        "modules_to_not_convert": ["visual"],
        "quant_method": "awq",
        "version": "gemm",
        "zero_point": True,
    }


_TO_MODULE = (
    (re.compile(r"^visual\."), "model.visual."),
    (re.compile(r"^model\.(?!visual\.|language_model\.)"), "model.language_model."),
)
_TO_LEGACY = (
    (re.compile(r"^model\.visual\."), "visual."),
    (re.compile(r"^model\.language_model\."), "model."),
)


def to_module_key(key: str) -> str:
    for pattern, repl in _TO_MODULE:
        if pattern.match(key):
            return pattern.sub(repl, key, count=1)
    return key


def to_legacy_key(key: str) -> str:
    for pattern, repl in _TO_LEGACY:
        if pattern.match(key):
            return pattern.sub(repl, key, count=1)
    return key


def quantize(weight: torch.Tensor, group: int = GROUP) -> tuple[torch.Tensor, ...]:
    """Asymmetric group quantization of ``weight [out, in]`` along ``in``.

    Returns ``q [out, in]`` (int32 in 0..15), ``scales [out, in/group]`` and
    ``zeros [out, in/group]`` (int32), as AutoAWQ's ``pseudo_quantize_tensor``.
    """
    out_f, in_f = weight.shape
    w = weight.float().reshape(out_f, in_f // group, group)
    hi, lo = w.amax(dim=-1), w.amin(dim=-1)
    scales = (hi - lo).clamp(min=1e-5) / MAX_Q
    zeros = (-torch.round(lo / scales)).clamp(0, MAX_Q)
    q = (torch.round(w / scales[..., None]) + zeros[..., None]).clamp(0, MAX_Q)
    return q.reshape(out_f, in_f).to(torch.int32), scales, zeros.to(torch.int32)


def fake_quantize(weight: torch.Tensor, group: int = GROUP) -> torch.Tensor:
    """Quantize then dequantize (what the int4 weight will compute like)."""
    q, scales, zeros = quantize(weight, group)
    return dequantize_int(q, scales, zeros, group).to(weight.dtype)


def dequantize_int(
    q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group: int = GROUP
) -> torch.Tensor:
    out_f, in_f = q.shape
    w = (q.reshape(out_f, in_f // group, group) - zeros[..., None]).float() * scales[..., None]
    return w.reshape(out_f, in_f)


def pack_columns(values: torch.Tensor) -> torch.Tensor:
    """int32 ``[rows, cols]`` of 4-bit values -> int32 ``[rows, cols/8]`` in AWQ order."""
    rows, cols = values.shape
    v = values.to(torch.int64).reshape(rows, cols // PACK, PACK)
    packed = torch.zeros((rows, cols // PACK), dtype=torch.int64)
    for nibble, column in enumerate(ORDER):
        packed |= v[:, :, column] << (BITS * nibble)
    return (((packed + 2**31) % 2**32) - 2**31).to(torch.int32)  # two's complement wrap


def unpack_columns(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_columns`: int32 ``[rows, cols/8]`` -> int32 ``[rows, cols]``."""
    rows, n = packed.shape
    p = packed.to(torch.int64) & 0xFFFFFFFF
    out = torch.zeros((rows, n, PACK), dtype=torch.int32)
    for nibble, column in enumerate(ORDER):
        out[:, :, column] = ((p >> (BITS * nibble)) & MAX_Q).to(torch.int32)
    return out.reshape(rows, n * PACK)


def pack_linear(
    q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor
) -> dict[str, torch.Tensor]:
    """``quantize`` output -> the AutoAWQ GEMM tensors of one linear layer."""
    return {
        "qweight": pack_columns(q.t().contiguous()),
        "qzeros": pack_columns(zeros.t().contiguous()),
        "scales": scales.t().contiguous().to(torch.float16),
    }


def unpack_linear(
    qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, group: int = GROUP
) -> torch.Tensor:
    """AutoAWQ GEMM tensors -> the dequantized weight ``[out, in]`` (float32)."""
    q = unpack_columns(qweight)  # [in, out]
    z = unpack_columns(qzeros)  # [in/group, out]
    s = scales.float()  # [in/group, out]
    idx = torch.arange(q.shape[0]) // group
    return ((q - z[idx]).float() * s[idx]).t().contiguous()
