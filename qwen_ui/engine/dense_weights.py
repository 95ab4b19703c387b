"""Dense copies of int4 weights, for matmuls of many rows on CUDA.

torch's int4 kernel reads a quarter of the bytes of a bf16 weight, which wins for one row
or a few; its time grows with the rows, while a bf16 matmul reads its weight once for any
row count up to the tensor cores' tile. So where the device has memory to spare, each int4
layer keeps a bf16 copy of its weight and multiplies by it from the row count where that
is faster, timed per layer shape when the model loads. A batch's decode step has one row
per sequence; a prompt has one per token (and then skips the per-call dequantize of
``prefill_dequant_rows``).

Copies are kept only when all of them together take at most the placement's
``dense_limit`` bytes (``dense_weight_share`` of ``vram_budget``); admission counts them
with the weights (:func:`config_copy_bytes` before loading, measured after).
"""

from __future__ import annotations

import functools
import logging
import statistics
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
from torch import nn

from qwen_ui.engine.awq import (
    KERNEL_DTYPE,
    Int4Linear,
    dequantize_tinygemm,
    inner_k_tiles,
    tile_gather,
)
from qwen_ui.engine.shapes import TextShape, quantized_weights

log = logging.getLogger(__name__)

ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # row counts timed per layer shape
REPEATS = 9  # calls per path and row count in each timed graph
FLUSH_BYTES = 256 << 20  # written before each timed call: more than any L2 cache
MATCH = 2e-2  # the most relative error allowed between the copy's and the kernel's output
COPY_ITEM = KERNEL_DTYPE.itemsize  # bytes per weight of a copy
C = TypeVar("C")  # a layer's copy of its weight, as keep_measured's callers make it


def copy_bytes(layers: Sequence[Int4Linear]) -> int:
    """Bytes the dense copies of ``layers`` take (bf16)."""
    return sum(COPY_ITEM * m.in_features * m.out_features for m in layers)


def config_copy_bytes(text: TextShape) -> int:
    """:func:`copy_bytes` from a model's text shape, before loading."""
    return quantized_weights(text) * COPY_ITEM


def crossover_rows(
    rows: Sequence[int], kernel_ms: Sequence[float], dense_ms: Sequence[float]
) -> int:
    """The fewest rows from which the dense copy was faster at every row count timed
    (``rows`` ascending); 0 when it was not faster at the largest."""
    threshold = 0
    for count, kernel, dense in reversed(list(zip(rows, kernel_ms, dense_ms, strict=True))):
        if dense >= kernel:
            break
        threshold = count
    return threshold


def keep_dense_copies(model: nn.Module, limit: int) -> int:
    """Give every CUDA int4 layer of ``model`` a dense copy used from its shape's measured
    crossover, when the copies fit in ``limit`` bytes. Returns the layers given one."""
    layers = [m for m in model.modules() if isinstance(m, Int4Linear) and _on_cuda_kernel(m)]
    if not layers or copy_bytes(layers) > limit:
        return 0
    try:
        return _keep(layers)
    except (RuntimeError, ValueError):  # the model still runs on its int4 kernels
        log.exception("dense copies of the int4 weights failed: none kept")
        for layer in layers:
            layer.drop_dense()
        return 0


def _keep(layers: list[Int4Linear]) -> int:
    def keep(layer: Int4Linear, weight: torch.Tensor, rows: int) -> None:
        layer.keep_dense(weight, rows)

    return keep_measured(layers, dense_weight, _measure, keep, "dense copies")


def keep_measured(
    layers: list[Int4Linear],
    copy: Callable[[Int4Linear], C | None],
    measure: Callable[[Int4Linear, C, torch.Tensor], int],
    keep: Callable[[Int4Linear, C, int], None],
    what: str,
) -> int:
    """For each layer, ``copy`` it (None: skipped), ``measure`` the first layer of each
    shape (the rows from which the copy is faster, 0 = never; a ``FLUSH_BYTES`` tensor
    for overwriting the L2 cache given) and ``keep`` the copy from those rows. Logs the
    crossover per shape; returns the layers given a copy."""
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=layers[0].packed.device)
    crossovers: dict[tuple[int, int], int] = {}
    kept = 0
    for layer in layers:
        made = copy(layer)
        if made is None:
            continue
        shape = (layer.in_features, layer.out_features)
        if shape not in crossovers:
            crossovers[shape] = measure(layer, made, flush)
        if crossovers[shape]:
            keep(layer, made, crossovers[shape])
            kept += 1
    log.info(
        "%s kept for %d of %d int4 layers (from rows: %s)",
        what,
        kept,
        len(layers),
        ", ".join(f"{i}x{o}: {r or 'never'}" for (i, o), r in crossovers.items()),
    )
    return kept


def _on_cuda_kernel(layer: Int4Linear) -> bool:
    return not layer.dequantized and layer.packed.is_cuda


def dense_weight(layer: Int4Linear) -> torch.Tensor | None:
    """``[out, in]`` bf16 from the kernel's packed weight, or None (logged) when it does not
    multiply as the kernel does (a packing layout this code does not know)."""
    tiles = inner_k_tiles(layer.in_features)
    gather = _gather(layer.packed.device, tiles)
    weight = dequantize_tinygemm(
        layer.packed, gather, layer.scales_and_zeros, layer.group_size, KERNEL_DTYPE
    )
    probe = torch.randn(8, layer.in_features, device=weight.device, dtype=KERNEL_DTYPE)
    expected = _kernel(layer, probe).float()
    error = (nn.functional.linear(probe, weight).float() - expected).norm() / expected.norm()
    if not error <= MATCH:  # also NaN
        log.warning("int4 layout not recognised: no dense copy (relative error %.3g)", float(error))
        return None
    return weight


@functools.cache
def _gather(device: torch.device, tiles: int) -> torch.Tensor:
    return tile_gather(device, tiles)


def _kernel(layer: Int4Linear, x: torch.Tensor) -> torch.Tensor:
    return torch._weight_int4pack_mm(x, layer.packed, layer.group_size, layer.scales_and_zeros)


def _measure(layer: Int4Linear, weight: torch.Tensor, flush: torch.Tensor) -> int:
    kernel_ms, dense_ms = [], []
    for rows in ROWS:
        x = torch.randn(rows, layer.in_features, device=weight.device, dtype=KERNEL_DTYPE)
        kernel_ms.append(time_ms(functools.partial(_kernel, layer, x), flush))
        dense_ms.append(time_ms(functools.partial(nn.functional.linear, x, weight), flush))
    log.debug(
        "int4 %dx%d, ms per call by rows %s: kernel %s, dense %s",
        layer.in_features,
        layer.out_features,
        ROWS,
        kernel_ms,
        dense_ms,
    )
    return crossover_rows(ROWS, kernel_ms, dense_ms)


def time_ms(call: Callable[[], object], flush: torch.Tensor) -> float:
    """Milliseconds per call as a recorded decode step runs it: ``REPEATS`` calls, each
    after the L2 cache is overwritten (a step reads every weight from device memory),
    recorded in one CUDA graph and replayed, less a graph of the overwrites alone. Timed
    call by call from Python, a short kernel's launch would be counted as well, and a
    step replayed from its graph launches nothing."""
    call()  # warm-up: the kernel's first call selects its configuration (or compiles)
    torch.cuda.synchronize()
    both = _replayed_ms(lambda: (flush.zero_(), call()))
    alone = _replayed_ms(flush.zero_)
    return max(both - alone, 0.0) / REPEATS


def _replayed_ms(work: Callable[[], object]) -> float:
    """The median of three replays of a graph of ``REPEATS`` calls of ``work``, in ms."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(REPEATS):
            work()
    graph.replay()
    times = []
    for _ in range(3):
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        graph.replay()
        end.record()
        end.synchronize()  # type: ignore[no-untyped-call]
        times.append(start.elapsed_time(end))
    return float(statistics.median(times))
