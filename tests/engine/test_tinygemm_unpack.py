"""The Triton unpacking of the CUDA int4 kernel's layout (``qwen_ui.engine.tinygemm_unpack``),
run by Triton's interpreter on the CPU (in a child process: the interpreter is chosen when
the kernel is defined) against the packing rule written out in ``test_awq.py``. The
interpreter truncates float casts where the GPU rounds to nearest, so values are compared
to a bf16 step of each rounding here; ``test_awq_cuda.py`` checks them bit for bit on the GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHECK = """
import torch
from qwen_ui.engine import awq
from qwen_ui.engine.tinygemm_unpack import unpack_dequantize
from tests.engine.test_awq import tinygemm_pack

awq.pack_for_cuda = tinygemm_pack  # the rule written out, for tile_gather's probes
# k-tiles per row: 4, and 3 (the interpreter runs 2 per program: the last one masked);
# groups wider than a program's columns (2 tiles of 32 or 64 columns, groups of 128)
CASES = [(2, 32, 4), (4, 64, 4), (8, 128, 4), (8, 32, 4), (2, 32, 3), (8, 128, 3),
         (2, 128, 4), (4, 128, 2), (2, 128, 8)]
for tiles, group, k_tiles in CASES:
    torch.manual_seed(tiles + group)
    n, k = 16, 16 * tiles * k_tiles
    q = torch.randint(0, 16, (n, k), dtype=torch.int32)
    packed = tinygemm_pack(q, tiles)
    gather = awq.tile_gather.__wrapped__(torch.device("cpu"), tiles)
    unit = torch.stack([torch.ones(k // group, n), torch.zeros(k // group, n)], -1)
    plain = unpack_dequantize(packed, gather, unit.to(torch.bfloat16), group, torch.bfloat16)
    assert torch.equal(plain.int() + 8, q), (tiles, group)
    sz = torch.randn(k // group, n, 2).to(torch.bfloat16)
    out = unpack_dequantize(packed, gather, sz, group, torch.bfloat16)
    eager = awq.dequantize_tinygemm(packed, gather, sz, group, torch.bfloat16)
    scale = sz[..., 0].float().t().repeat_interleave(group, 1)
    # one bf16 step of the product and one of the sum, at most
    step = ((q - 8).float() * scale).abs() * 2**-7 + eager.float().abs() * 2**-7 + 1e-30
    assert bool(((out.float() - eager.float()).abs() <= step).all()), (tiles, group)
try:
    unpack_dequantize(packed, gather, sz.float(), group, torch.bfloat16)
except ValueError:
    print("ok")
"""


def test_unpacking_matches_the_packing_rule() -> None:
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", CHECK],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")
