"""The instructions the engine's few-row int4 kernel compiles to on an H200, without a GPU.

Triton compiles a kernel for any target with the ``ptxas`` its wheel carries, and
``cuobjdump`` (also in the wheel) lists the machine code (SASS). This prints, per kernel
configuration, how many of each instruction the kernel holds and the registers a thread
uses, so a change to ``qwen_ui/engine/triton_int4.py`` can be weighed before a device call
(the H200 sweeps showed the kernel's time flat in the rows it multiplies, about one
128 x 128 block per microsecond per SM: docs/BENCHMARKS.md). Pointer arguments and sizes
are compiled as divisible by 16, as Triton specializes them when the engine launches
the kernel.

    python bench/int4_sass.py                        # the engine's plans, 7B shapes
    python bench/int4_sass.py --block-n 64 --top 30  # one block width

Prints one JSON document on stdout: per configuration, instruction counts (whole
opcodes, and shared-memory stores by width), the total, and registers per thread.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from qwen_ui.engine import triton_int4

TOOLS = Path(triton.__file__).resolve().parent / "backends" / "nvidia" / "bin"
SIGNATURE = {
    "x_ptr": "*bf16",
    "w_ptr": "*i32",
    "sz_ptr": "*bf16",
    "out_ptr": "*fp32",
    "m": "i32",
    "n": "i32",
    "k": "i32",
    "k_per_split": "i32",
}
_OPCODE = re.compile(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P[T\d]\s+)?([A-Z][A-Z0-9_.]*)")


def sass(
    block_n: int,
    stages: int,
    shared: bool,
    arch: int = 90,
    kernel: Any = None,
    flags: dict[str, bool] | None = None,
) -> str:
    """The SASS of ``kernel`` (default: the engine's) for one configuration (``shared``:
    split, atomic output); ``flags``: its other compile-time switches."""
    constants: dict[str, Any] = {
        "GROUP": 128,
        "BLOCK_M": triton_int4.MAX_ROWS,
        "BLOCK_N": block_n,
        "BLOCK_K": triton_int4.BLOCK_K,
        **(flags or {}),
        "ATOMIC": shared,
    }
    source = ASTSource(
        fn=kernel or triton_int4._int4_rows,
        signature={**SIGNATURE, **dict.fromkeys(constants, "constexpr")},
        constexprs=constants,
        attrs={(i,): [["tt.divisibility", 16]] for i in range(len(SIGNATURE))},
    )
    compiled = triton.compile(
        source, target=GPUTarget("cuda", arch, 32), options={"num_warps": 4, "num_stages": stages}
    )
    with tempfile.TemporaryDirectory() as work:
        cubin = Path(work) / "kernel.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        return _run("cuobjdump", "-sass", str(cubin)) + _run("cuobjdump", "-res-usage", str(cubin))


def _bench() -> Any:
    """``bench/bench_int4_triton.py`` as a module."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_int4_triton

    return bench_int4_triton


def _run(tool: str, *args: str) -> str:
    return subprocess.run(
        [str(TOOLS / tool), *args], capture_output=True, text=True, check=True
    ).stdout


def summary(listing: str, top: int) -> dict[str, Any]:
    """Instruction counts of a SASS listing: the ``top`` most frequent opcodes (first
    word), shared-memory stores by width, the total, and registers per thread."""
    full = [m.group(1) for m in _OPCODE.finditer(listing)]
    opcodes = collections.Counter(op.split(".")[0] for op in full)
    stores = collections.Counter(op for op in full if op.startswith("STS"))
    registers = re.search(r"REG:(\d+)", listing)
    return {
        "opcodes": dict(opcodes.most_common(top)),
        "shared_stores": dict(stores),
        "total": sum(opcodes.values()),
        "registers": int(registers.group(1)) if registers else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--block-n", type=int, nargs="*", default=[64, 128])
    p.add_argument("--stages", type=int, default=3)
    p.add_argument("--top", type=int, default=20)
    p.add_argument(
        "--joined",
        choices=["cast", "magic", "asm"],
        help="bench/bench_int4_triton.py's joined kernel with this dequantizing, tiled",
    )
    p.add_argument(
        "--dequant",
        choices=["pairs", "float"],
        default="pairs",
        help="the engine's kernel dequantizing in bf16 pairs (on sm_90) or in float32",
    )
    args = p.parse_args(argv)
    kernel, flags = None, {"PAIRS": args.dequant == "pairs"}
    if args.joined:
        kernel = _bench()._int4_mm_joined
        flags = {"MAGIC": args.joined == "magic", "ASM": args.joined == "asm", "TILED": True}
    result: dict[str, Any] = {"triton": triton.__version__, "arch": "sm_90", "configs": {}}
    for block_n in args.block_n:
        for shared in (False, True):
            name = f"n{block_n}-s{args.stages}-{'split' if shared else 'whole'}"
            listing = sass(block_n, args.stages, shared, kernel=kernel, flags=flags)
            result["configs"][name] = summary(listing, args.top)
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
