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
    argv = ["--device", "cpu", "--shapes", "48x512", "--rows", "1,5", "--iters", "1"]
    grid = ["--probe-rows", "5", "--keep", "2", "--splits", "1,2", "--blocks", "32x64,64x128"]
    ways = ",".join((*script.SCALED_WAYS, "pairs"))  # pairs-asm is PTX: not interpreted
    done = subprocess.run(
        [sys.executable, str(BENCH / "bench_int4_triton.py"), *argv, *grid, "--ways", ways],
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    shape = json.loads(done.stdout)["shapes"]["48x512"]
    probed = shape["probe"]["5"]
    # eight scaled ways x 2 blocks x 2 splits; pairs only with the group-deep block
    assert len(probed) == 8 * 2 * 2 + 2
    # float32 in the interpreter; scaling after the product subtracts 136 s sum(x) from
    # the magic nibbles' product (and pairs'), which costs a few bits of float32
    assert all(r["max_rel_diff"] < 2e-5 for r in probed.values()), probed
    for rows in ("1", "5"):
        entry = shape[rows]
        assert len(entry["configs"]) == 2 and entry["best"] in entry["configs"]
        assert entry["us"] > 0 and entry["max_rel_diff"] < 2e-5


def test_pack_puts_row_8w_plus_j_in_nibble_j() -> None:
    q = torch.arange(32, dtype=torch.int32).view(2, 16) % 16  # [n=2, k=16]
    packed = load_script("bench_int4_triton").pack(q)
    assert packed.shape == (2, 2)  # [k / 8, n]
    for word in range(2):
        for col in range(2):
            for j in range(8):
                assert (int(packed[word, col]) >> (4 * j)) & 0xF == int(q[col, 8 * word + j])
