"""The engine's int4 kernels per layer shape, as its load-time timing sees them: torch's
``_weight_int4pack_mm``, the Triton tiled kernel and the Triton vector kernel
(``qwen_ui/engine/triton_int4.py``), on the 7B decoder's four int4 shapes (q/k/v and
gate/up fused), random AWQ weights, bf16 inputs.

    python bench/bench_int4_kernels.py                 # H200 (CUDA only)
    python bench/bench_int4_kernels.py --shapes qkv,o  # some of the shapes

Each time is the engine's own measurement (:func:`triton_int4.time_kernels`: calls
replayed from a CUDA graph after the L2 cache is overwritten). Prints one JSON document:
per shape, the milliseconds per call of each kernel by row count, the rows the engine
would give the Triton kernels and the vector kernel, the weight's bytes and the vector
kernel's read rate at one row; and per row count the sums over a step's 112 layers (28 of
each shape): torch's kernel alone, and the engine's choice.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from qwen_ui.engine import triton_int4
from qwen_ui.engine.awq import Int4Linear
from qwen_ui.engine.dense_weights import FLUSH_BYTES

SHAPES = {  # name: (in_features, out_features) of the 7B decoder's fused int4 layers
    "qkv": (3584, 4608),
    "o": (3584, 3584),
    "gate_up": (3584, 37888),
    "down": (18944, 3584),
}
LAYERS = 28  # of each shape in a decode step
GROUP = 128


def random_layer(in_features: int, out_features: int, device: torch.device) -> Int4Linear:
    """An int4 layer of random AutoAWQ GEMM tensors (any int32 packs 8 valid nibbles)."""
    generator = torch.Generator().manual_seed(in_features * 7 + out_features)
    qweight = torch.randint(
        -(2**31),
        2**31 - 1,
        (in_features, out_features // 8),
        generator=generator,
        dtype=torch.int32,
    )
    qzeros = torch.randint(
        -(2**31),
        2**31 - 1,
        (in_features // GROUP, out_features // 8),
        generator=generator,
        dtype=torch.int32,
    )
    scales = (
        torch.rand(in_features // GROUP, out_features, generator=generator) * 0.01 + 0.001
    ).half()
    return Int4Linear.from_awq(qweight, qzeros, scales, None, GROUP, device, torch.bfloat16)


def one_shape(in_features: int, out_features: int, flush: torch.Tensor) -> dict[str, Any]:
    layer = random_layer(in_features, out_features, flush.device)
    copy = triton_int4.copy_of(layer)
    if copy is None:
        return {"error": "the Triton copy did not multiply as torch's kernel"}
    timed = triton_int4.time_kernels(layer, *copy, flush)
    weight_bytes = in_features * out_features // 2 + in_features // GROUP * out_features * 4
    vec_gbs = weight_bytes / (timed.vec_ms[0] * 1e-3) / 1e9 if timed.vec_ms else None
    return {
        "rows": list(triton_int4.ROWS),
        "torch_ms": _round(timed.torch_ms),
        "tiled_ms": _round(timed.tiled_ms),
        "vector_ms": _round(timed.vec_ms),
        "triton_from_rows": timed.rows_from,
        "vector_up_to_rows": timed.vec_rows,
        "vector_split": timed.tried.vec_split,
        "vector_columns": timed.tried.vec_block_n or timed.tried.block_n,
        "chosen_ms": _round(_chosen(timed)),
        "weight_bytes": weight_bytes,
        "vector_gb_s_at_1_row": None if vec_gbs is None else round(vec_gbs, 1),
        "torch_gb_s_at_1_row": round(weight_bytes / (timed.torch_ms[0] * 1e-3) / 1e9, 1),
    }


def _chosen(timed: triton_int4.Timed) -> list[float]:
    """The engine's time per row count: its Triton kernels from ``rows_from``, torch's
    below."""
    start = timed.rows_from or sys.maxsize
    return [
        triton if rows >= start else torch_ms
        for rows, torch_ms, triton in zip(
            triton_int4.ROWS, timed.torch_ms, timed.triton_ms, strict=True
        )
    ]


def _round(times: Any) -> list[float]:
    return [round(t, 4) for t in times]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"of {','.join(SHAPES)}")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        sys.stderr.write("bench_int4_kernels needs CUDA\n")
        return 2
    device = torch.device("cuda")
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=device)
    shapes = {name: one_shape(*SHAPES[name], flush) for name in args.shapes.split(",")}
    report: dict[str, Any] = {
        "command": " ".join(
            ["python bench/bench_int4_kernels.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "device": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "shapes": shapes,
    }
    if all("chosen_ms" in s for s in shapes.values()) and len(shapes) == len(SHAPES):
        report["step_ms"] = {
            way: {
                str(rows): round(LAYERS * sum(s[way][i] for s in shapes.values()), 3)
                for i, rows in enumerate(triton_int4.ROWS)
            }
            for way in ("torch_ms", "chosen_ms")
        }
    sys.stdout.write(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
