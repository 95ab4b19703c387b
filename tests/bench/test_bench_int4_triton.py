"""``bench/bench_int4_triton.py`` on the CPU through Triton's interpreter: every block size
and split of the sweep multiplies by the packed int4 weight as the dequantized reference
does."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from tests.bench.support import BENCH, load_script


def test_every_config_matches_the_dequantized_weight() -> None:
    # the interpreter is chosen when triton is first imported: a process of its own
    argv = ["--device", "cpu", "--shapes", "48x512", "--rows", "1,5", "--iters", "1", "--sweep"]
    done = subprocess.run(
        [sys.executable, str(BENCH / "bench_int4_triton.py"), *argv],
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    result = json.loads(done.stdout)
    for rows in ("1", "5"):
        entry = result["shapes"]["48x512"][rows]
        # 512 = 4 x 128 = 8 x 64: splits 1, 2, 4 for both blocks, 8 for 64-wide ones
        assert len(entry["configs"]) == 2 * 4 * (3 + 4)  # scaled before and after, 4 widths
        assert entry["best"] in entry["configs"] and entry["triton_us"] > 0
        assert entry["max_rel_diff"] < 1e-5, entry
    assert set(result["step_28_layers"]) == {"1", "5"}


def test_pack_puts_column_8w_plus_j_in_nibble_j() -> None:
    packed = load_script("bench_int4_triton").pack(torch.arange(16, dtype=torch.int32).view(1, 16))
    assert packed.shape == (1, 2)
    for word in range(2):
        for j in range(8):
            assert (int(packed[0, word]) >> (4 * j)) & 0xF == 8 * word + j
