"""``bench/bench_vision.py`` on the CPU with the tiny architecture: the batched and the
compiled towers give the stock tower's output, and the profile counts the forward's
operators."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.bench.support import run_main


@pytest.mark.slow
def test_the_three_towers_agree_and_the_profile_is_reported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--arch", "tiny", "--depth", "2", "--device", "cpu", "--reps", "1", "--warmup", "0"]
    result = run_main(
        "bench_vision", [*argv, "--sets", "1x448x448", "--compiled", "--profile"], capsys
    )
    one: Any = result["1x448x448"]
    assert one["patches"] == 1024
    scale = one["output_abs_max"]
    assert one["max_abs_diff"] <= 1e-5 * scale
    assert one["compiled_max_abs_diff"] <= 1e-5 * scale
    assert one["stock_ms"] > 0 and one["batched_ms"] > 0 and one["compiled_ms"] > 0
    for key in ("batched_profile", "compiled_profile"):
        assert one[key]["calls_per_step"] > 0
        assert one[key]["by_category"]


def test_unseen_sizes_are_timed_with_and_without_cudnn(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--arch", "tiny", "--depth", "2", "--device", "cpu", "--sets", "", "--novel", "2"]
    result: Any = run_main("bench_vision", argv, capsys)["novel"]
    seen = set()
    for name in ("cudnn", "no_cudnn"):
        rows = result[name]["sizes"]
        assert len(rows) == 2 and all(r["first_ms"] > 0 and r["again_ms"] > 0 for r in rows)
        seen.update(tuple(r["size"]) for r in rows)
    assert len(seen) == 4  # each setting on sizes of its own
    assert torch.backends.cuda.cudnn_sdp_enabled()  # left as found
