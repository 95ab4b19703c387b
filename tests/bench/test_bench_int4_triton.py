"""``bench/bench_int4_triton.py`` on the CPU through Triton's interpreter: every way, block
size and split of the grid multiplies by the packed int4 weight as the dequantized
reference does."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from tests.bench.support import BENCH, load_script


def test_every_config_matches_the_dequantized_weight() -> None:
    script = load_script("bench_int4_triton")
    # the interpreter is chosen when triton is first imported: a process of its own
    argv = ["--device", "cpu", "--shapes", "64x640", "--rows", "1,5", "--iters", "1"]
    # 640 = 5 blocks of 128 or 10 of 64: three splits do not divide either
    grid = ["--probe-rows", "5", "--keep", "2", "--splits", "1,3", "--blocks", "32x64,64x128"]
    grid += ["--warps", "4", "--stages", "3"]
    # the *-asm ways are PTX, which the interpreter does not run
    # (half takes a bf16 constant, which the interpreter lacks: measured on the GPU only)
    ways = ",".join(
        (
            *script.SCALED_WAYS,
            *(w for w in script.JOINED_WAYS if not w.endswith("-asm")),
            "pairs",
            "tiled-pairs",
            "tiled-joined-magic",
            "tiled-spread-cast-before",
        )
    )
    done = subprocess.run(
        [sys.executable, str(BENCH / "bench_int4_triton.py"), *argv, *grid, "--ways", ways],
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    shape = json.loads(done.stdout)["shapes"]["64x640"]
    probed = shape["probe"]["5"]
    # twelve ways of any block x 2 blocks x 2 splits; the pairs only with the group-deep block
    assert len(probed) == 12 * 2 * 2 + 2 * 2
    # float32 in the interpreter; scaling after the product subtracts 136 s sum(x) from
    # the magic nibbles' product (and pairs'), which costs a few bits of float32
    assert all(r["max_rel_diff"] < 2e-5 for r in probed.values()), probed
    for rows in ("1", "5"):
        entry = shape[rows]
        assert len(entry["configs"]) == 2 and entry["best"] in entry["configs"]
        assert entry["us"] > 0 and entry["max_rel_diff"] < 2e-5


def test_tile_makes_each_programs_block_contiguous() -> None:
    script = load_script("bench_int4_triton")
    packed = torch.arange(4 * 6, dtype=torch.int32).view(4, 6)  # [k / 8 = 4, n = 6], k = 32
    tiled = script.tile(packed, block_n=3, block_k=16)  # blocks of 2 words x 3 columns
    assert tiled.shape == (2, 2, 2, 3)
    assert torch.equal(tiled[1, 0], packed[0:2, 3:6])  # columns 3..5, k 0..15
    assert torch.equal(tiled[0, 1], packed[2:4, 0:3])  # columns 0..2, k 16..31
