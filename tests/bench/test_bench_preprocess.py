"""``bench/bench_preprocess.py`` on the CPU: the processor's own batch, one image per
thread and the engine's split way, timed on the same images, give the same patches."""

from __future__ import annotations

import pytest

from tests.bench.support import run_main


def test_threads_give_the_batchs_patches(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--counts", "1,3", "--size", "64x48", "--ways", "batch,threads,split", "--reps", "1",
            "--threads", "2"]  # fmt: skip
    result = run_main("bench_preprocess", argv, capsys)
    assert result["threads"] == 2
    for count in ("1x64x48", "3x64x48"):
        row = result[count]
        assert isinstance(row, dict)
        assert row["batch_ms"] > 0 and row["threads_ms"] > 0
        assert row["threads_max_abs_diff"] == 0.0
        assert row["split_ms"] > 0 and row["split_max_abs_diff"] == 0.0
