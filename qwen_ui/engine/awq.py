"""AutoAWQ checkpoints kept 4-bit through PyTorch's built-in int4 kernels.

The checkpoint format itself (``qweight``/``qzeros``/``scales``, nibble order, key names) is
:mod:`qwen_ui.engine.awq_format`; this module turns it into what torch's kernels take.

PyTorch's int4 weight-only kernels (``torch._weight_int4pack_mm`` on CUDA,
``torch._weight_int4pack_mm_for_cpu`` on CPU) compute with ``W[o, i] = (q - 8) * s + z'``
per group, taking ``scales_and_zeros[k / g, n, 2]`` with ``[..., 0] = s`` and
``[..., 1] = z'``. Rewriting AWQ's ``(q - z) * s = (q - 8) * s + (8 - z) * s`` gives
``z' = (8 - z) * s``, computed in float32 before the cast to the compute dtype.
``tests/engine/test_awq.py`` pins this against a dequantized reference.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from qwen_ui.engine import awq_format
from qwen_ui.engine.awq_format import PACK, unpack_columns

log = logging.getLogger(__name__)

KERNEL_GROUPS = (32, 64, 128, 256)
# The kernels run in bf16 on both devices: CUDA's takes nothing else, and on the CPU the
# float32 variant measured 4-85x slower than bf16 (see docs/engine.md).
KERNEL_DTYPE = torch.bfloat16


def kernel_scales_and_zeros(
    qzeros: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    """AWQ zeros/scales → torch's ``scales_and_zeros[k / g, n, 2]`` (see module doc)."""
    s = scales.float()
    z = unpack_columns(qzeros).float()
    return torch.stack([s, (8.0 - z) * s], dim=-1).to(dtype).contiguous()


def dequantize_for_kernel(
    qweight: torch.Tensor, scales_and_zeros: torch.Tensor, group_size: int, dtype: torch.dtype
) -> torch.Tensor:
    """``[out, in]`` in ``dtype`` from AWQ's ``qweight`` and the kernel's
    ``scales_and_zeros``, computed as the kernel does: ``(q - 8) * s + z'``."""
    work = torch.float32 if dtype == torch.float32 else KERNEL_DTYPE
    q = unpack_columns(qweight).to(work) - 8.0  # [in, out]
    sz = scales_and_zeros.to(work).repeat_interleave(group_size, dim=0)
    return (q * sz[..., 0] + sz[..., 1]).t().to(dtype)


def dequantize_tinygemm(
    packed: torch.Tensor,
    gather: torch.Tensor,
    scales_and_zeros: torch.Tensor,
    group_size: int,
    dtype: torch.dtype,
) -> torch.Tensor:
    """``[out, in]`` in ``dtype`` from the CUDA kernel's own packed weight (no second copy
    of the weight kept for prefill), computed as :func:`dequantize_for_kernel` does. Written
    row-major in the output's own order (one group's scale and zero broadcast along its
    row), so that Inductor's kernel writes the weight contiguously."""
    work = torch.float32 if dtype == torch.float32 else KERNEL_DTYPE
    q = unpack_tinygemm(packed, gather).to(work) - 8.0  # [out, in]
    out_features, in_features = q.shape
    groups = q.view(out_features, in_features // group_size, group_size)
    sz = scales_and_zeros.to(work).transpose(0, 1).unsqueeze(-2)  # [out, in / g, 1, 2]
    return (groups * sz[..., 0] + sz[..., 1]).reshape(out_features, in_features).to(dtype)


def _nibbles(words: torch.Tensor) -> torch.Tensor:
    """int32 ``[..., w]`` → ``[..., 8 w]``: each word's nibbles, lowest bits first."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=words.device)
    return ((words.unsqueeze(-1) >> shifts) & 0xF).flatten(-2)


def unpack_tinygemm(packed: torch.Tensor, gather: torch.Tensor) -> torch.Tensor:
    """The CUDA kernel's ``packed[n / 8, k / (16 t), 32, t / 2]`` → int32 ``[n, k]`` of values
    0..15. Each block of the packed tensor holds one ``[8, 16 t]`` tile of the matrix, its
    ``128 t`` nibbles in an order fixed by ``t`` alone; ``gather`` (:func:`tile_gather`)
    puts them back in row-major order."""
    n_tiles, k_tiles = packed.shape[0], packed.shape[1]
    values = _nibbles(packed.reshape(n_tiles, k_tiles, -1))[..., gather]
    width = gather.numel() // 8
    return values.view(n_tiles, k_tiles, 8, width).permute(0, 2, 1, 3).reshape(n_tiles * 8, -1)


def pack_for_cuda(q: torch.Tensor, inner_k_tiles: int) -> torch.Tensor:
    """int32 ``[n, k]`` of values 0..15 (on CUDA) → the kernel's packed weight."""
    as_uint8 = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)
    return torch._convert_weight_to_int4pack(as_uint8, inner_k_tiles)


@functools.cache
def tile_gather(device: torch.device, inner_k_tiles: int) -> torch.Tensor:
    """For :func:`unpack_tinygemm`: which nibble of a packed block holds each position of
    its ``[8, 16 t]`` tile, found by packing one tile whose values are their own positions,
    four bits at a time."""
    width = 16 * inner_k_tiles
    positions = torch.arange(8 * width, dtype=torch.int32, device=device).view(8, width)
    held = torch.zeros(8 * width, dtype=torch.int64, device=device)
    for shift in range(0, (8 * width - 1).bit_length(), 4):
        block = pack_for_cuda((positions >> shift) & 0xF, inner_k_tiles)
        held |= _nibbles(block.reshape(-1)).long() << shift
    return torch.argsort(held)


Dequantize = Callable[[torch.Tensor, torch.Tensor, int, torch.dtype], torch.Tensor]
DequantizePacked = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, int, torch.dtype], torch.Tensor
]


def kernel_fits(device: torch.device, out_features: int, in_features: int, group: int) -> bool:
    """Whether torch's int4 kernel accepts this shape on ``device``."""
    if group not in KERNEL_GROUPS or in_features % group:
        return False
    if device.type == "cuda":
        return out_features % 8 == 0 and in_features % 32 == 0 and _cuda_int4_capable(device)
    if device.type == "cpu":
        return out_features % 16 == 0 and in_features % 2 == 0
    return False


def _cuda_int4_capable(device: torch.device) -> bool:
    major, _minor = torch.cuda.get_device_capability(device)
    return major >= 8


def inner_k_tiles(in_features: int) -> int:
    for tiles in (8, 4, 2):
        if in_features % (tiles * 16) == 0:
            return tiles
    raise ValueError(f"in_features {in_features} fits no int4 tiling")


class Int4Linear(nn.Module):
    """A linear layer whose weight stays 4-bit, multiplied by torch's int4 kernel.

    Where no kernel fits the shape or device, the weight is dequantized once to the
    compute dtype (``self.dequantized`` tells which path a layer took).
    """

    packed: torch.Tensor
    scales_and_zeros: torch.Tensor
    weight: torch.Tensor
    dense: torch.Tensor
    awq_qweight: torch.Tensor
    tile_gather: torch.Tensor
    rows_words: torch.Tensor

    def __init__(
        self, in_features: int, out_features: int, group_size: int, dtype: torch.dtype
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.group_size = group_size
        self.dtype = dtype
        self.dequantized = False
        self.bias: nn.Parameter | None = None
        # Inputs of more rows than this (a long prefill) take a dequantized weight instead
        # of the int4 kernel, which is slow at large batch; 0 = always the kernel.
        self.prefill_rows = 0
        # Inputs of at least this many rows take a kept bf16 copy of the weight
        # (qwen_ui.engine.dense_weights); 0 = no copy kept
        self.dense_rows = 0
        # Inputs of rows_from to rows_to rows take the Triton kernel's operator on its own
        # copy of the weight (qwen_ui.engine.triton_int4); 0 = never
        self.rows_from = 0
        self.rows_to = 0
        self.rows_plan: tuple[int, int, int] = (1, 1, 1)  # the operator's sizes
        # how that weight is computed: the loader swaps in compiled (fused) versions on CUDA
        self.dequantize: Dequantize = dequantize_for_kernel
        self.dequantize_packed: DequantizePacked = dequantize_tinygemm

    @classmethod
    def from_awq(
        cls,
        qweight: torch.Tensor,
        qzeros: torch.Tensor,
        scales: torch.Tensor,
        bias: torch.Tensor | None,
        group_size: int,
        device: torch.device,
        dtype: torch.dtype,
        prefill_rows: int = 0,
    ) -> Int4Linear:
        """``prefill_rows > 0`` also keeps AWQ's ``qweight`` (another 4 bits per weight) to
        dequantize from, one layer at a time, for inputs of more rows than that."""
        in_features, out_features = qweight.shape[0], qweight.shape[1] * PACK
        layer = cls(in_features, out_features, group_size, dtype)
        qweight, qzeros, scales = (t.to(device) for t in (qweight, qzeros, scales))
        if kernel_fits(device, out_features, in_features, group_size):
            q = layer._set_kernel_weights(qweight, qzeros, scales, device)
            if prefill_rows > 0:
                layer.prefill_rows = prefill_rows
                layer._keep_prefill_source(q, qweight)
        else:
            weight = awq_format.dequantize(qweight, qzeros, scales, group_size).to(dtype)
            layer.register_buffer("weight", weight)
            layer.dequantized = True
        if bias is not None:
            layer.bias = nn.Parameter(bias.to(device=device, dtype=dtype), requires_grad=False)
        return layer

    def _set_kernel_weights(
        self, qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, dev: torch.device
    ) -> torch.Tensor:
        """The kernel's packed weight and scales; returns the int4 values ``[n, k]``."""
        q = unpack_columns(qweight).t().contiguous()  # int32 [n, k]
        if dev.type == "cuda":
            packed = pack_for_cuda(q, inner_k_tiles(self.in_features))
        else:
            packed = torch._convert_weight_to_int4pack_for_cpu(q, 1)
        self.register_buffer("packed", packed)
        self.register_buffer(
            "scales_and_zeros", kernel_scales_and_zeros(qzeros, scales, KERNEL_DTYPE)
        )
        return q

    def _keep_prefill_source(self, q: torch.Tensor, qweight: torch.Tensor) -> None:
        """What a long prefill dequantizes from: on CUDA the kernel's own packed weight
        (nothing more kept) when :func:`unpack_tinygemm` gives ``q`` back exactly, checked
        here for every layer; otherwise a copy of AWQ's ``qweight`` (4 more bits per
        weight)."""
        if q.is_cuda:
            gather = tile_gather(q.device, inner_k_tiles(self.in_features))
            if torch.equal(unpack_tinygemm(self.packed, gather), q):
                self.register_buffer("tile_gather", gather, persistent=False)
                return
            log.warning("int4 layout not recognised: prefill keeps a copy of the AWQ weight")
        self.register_buffer("awq_qweight", qweight.contiguous())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dequantized:
            return nn.functional.linear(x, self.weight.to(x.dtype), self.bias)
        shape = x.shape
        rows = x.numel() // self.in_features
        if self.rows_from and self.rows_from <= rows <= self.rows_to:
            words, sz, group = self.rows_words, self.scales_and_zeros, self.group_size
            out = torch.ops.qwen_ui.int4_rows(self._flat(x), words, sz, group, *self.rows_plan)
            return self._finish(out.to(x.dtype), shape)
        if self.dense_rows and rows >= self.dense_rows:
            # the input rounded to bf16 as the kernel takes it
            return nn.functional.linear(x.to(KERNEL_DTYPE).to(x.dtype), self.dense, self.bias)
        if self.prefill_rows and rows > self.prefill_rows:
            # the input rounded to bf16 as the kernel takes it; the weight in the compute
            # dtype (bf16 on CUDA, float32 on the CPU)
            weight = self.dequantized_weight(x.dtype)
            return nn.functional.linear(x.to(KERNEL_DTYPE).to(x.dtype), weight, self.bias)
        flat = self._flat(x)
        if flat.is_cuda:
            out = torch._weight_int4pack_mm(
                flat, self.packed, self.group_size, self.scales_and_zeros
            )
        else:
            out = torch._weight_int4pack_mm_for_cpu(
                flat, self.packed, self.group_size, self.scales_and_zeros
            )
        return self._finish(out.to(x.dtype), shape)

    def _flat(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` as the int4 kernels take it: ``[rows, in]``, bf16, contiguous."""
        return x.reshape(-1, self.in_features).to(KERNEL_DTYPE).contiguous()

    def _finish(self, out: torch.Tensor, shape: torch.Size) -> torch.Tensor:
        """The kernels' ``[rows, out]`` with the bias added, in the input's shape."""
        if self.bias is not None:
            out = out + self.bias.to(out.dtype)
        return out.reshape(*shape[:-1], self.out_features)

    def keep_dense(self, weight: torch.Tensor, rows: int) -> None:
        """Multiply inputs of ``rows`` rows or more by ``weight`` (``[out, in]``, the
        compute dtype), a dense copy of this layer's int4 weight."""
        self.register_buffer("dense", weight, persistent=False)
        self.dense_rows = rows

    def drop_dense(self) -> None:
        """Back to the int4 kernel for every row count; the copy is freed."""
        self.dense_rows = 0
        if hasattr(self, "dense"):
            delattr(self, "dense")

    def keep_rows_kernel(
        self, words: torch.Tensor, plan: tuple[int, int, int], rows_from: int, rows_to: int
    ) -> None:
        """Multiply inputs of ``rows_from`` to ``rows_to`` rows by the Triton kernel's
        operator on ``words``, its copy of this layer's weight."""
        self.register_buffer("rows_words", words, persistent=False)
        self.rows_plan = plan
        self.rows_from, self.rows_to = rows_from, rows_to

    def drop_rows_kernel(self) -> None:
        """Back to the other paths for every row count; the copy is freed."""
        self.rows_from = self.rows_to = 0
        if hasattr(self, "rows_words"):
            delattr(self, "rows_words")

    def dequantized_weight(self, dtype: torch.dtype) -> torch.Tensor:
        """``[out, in]`` in ``dtype`` (only with ``prefill_rows``): from the kernel's packed
        weight (:func:`dequantize_tinygemm`) or the kept AWQ ``qweight``
        (:func:`dequantize_for_kernel`)."""
        sz, group = self.scales_and_zeros, self.group_size
        if hasattr(self, "tile_gather"):
            return self.dequantize_packed(self.packed, self.tile_gather, sz, group, dtype)
        return self.dequantize(self.awq_qweight, sz, group, dtype)

    def extra_repr(self) -> str:
        path = "dequantized" if self.dequantized else "int4 kernel"
        if self.rows_from:
            path += f", Triton from {self.rows_from} to {self.rows_to} rows"
        if self.dense_rows:
            path += f", dense from {self.dense_rows} rows"
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"group_size={self.group_size}, {path}"
        )


def awq_settings(config: Any) -> tuple[int, bool] | None:
    """``(group_size, zero_point)`` when ``config`` declares an AutoAWQ GEMM checkpoint."""
    quant = getattr(config, "quantization_config", None)
    if quant is None:
        return None
    get = quant.get if isinstance(quant, dict) else lambda k, d=None: getattr(quant, k, d)
    if str(get("quant_method", "")).lower() != "awq":
        return None
    if int(get("bits", 4)) != 4 or str(get("version", "gemm")).lower() != "gemm":
        raise ValueError("only 4-bit AutoAWQ GEMM checkpoints are supported")
    return int(get("group_size", 128)), bool(get("zero_point", True))
