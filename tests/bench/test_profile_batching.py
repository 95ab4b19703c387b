"""``bench/profile_batching.py`` runs on the CPU with the tiny architecture: each bucket's
step is timed, and ``--kernels`` profiles the steps of the row counts it names."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.support import run_main


@pytest.mark.slow
def test_buckets_and_step_kernels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "--device", "cpu", "--arch", "tiny", "--rows", "1,2", "--steps", "2",
        "--warmup", "1", "--compiled-rows", "", "--kernels", "1,2", "--variants", "graph",
        "--kernels-compiled", "1", "--workdir", str(tmp_path),
    ]  # fmt: skip
    result = run_main("profile_batching", argv, capsys)
    graph = result["graph"]
    assert isinstance(graph, dict) and set(graph["buckets"]) == {"1", "2"}
    kernels = result["kernels"]
    assert isinstance(kernels, dict) and set(kernels) == {"1", "2"}
    for summary in kernels.values():
        assert summary["by_category"]["int4 matmul"]["calls_per_step"] > 0
    compiled = result["kernels-compiled"]
    assert isinstance(compiled, dict) and set(compiled) == {"1"}
    assert compiled["1"]["device_us_per_step"] > 0
    # Inductor fuses the step's elementwise operators: fewer calls than the eager step
    assert compiled["1"]["calls_per_step"] < kernels["1"]["calls_per_step"]
    assert "kernels-dense" not in result  # CUDA only
    assert "one-request" not in result  # not among --variants
