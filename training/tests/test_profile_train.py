"""``training/profile_train.py`` runs a few demo-model training steps on the CPU and reports
their pace, the data wait and the operators' time (host syncs are CUDA-only: none here)."""

from __future__ import annotations

import pytest
import torch

from tests.bench.support import run_main
from training.tests.support import TRAINING


@pytest.mark.slow
def test_training_steps_are_profiled(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--device", "cpu", "--batch", "2", "--workers", "0", "--max-pixels", "28224"]
    result = run_main(
        "profile_train",
        [*argv, "--warmup", "1", "--steps", "1", "--profiled-steps", "1"],
        capsys,
        TRAINING,
    )
    assert float(str(result["steps_per_s"])) > 0
    assert 0 <= float(str(result["data_wait_share"])) < 1
    assert result["host_syncs"] is None
    assert result["graphs_compiled"] == {"warmup": 0, "timed_steps": 0}  # no --compile
    categories = result["by_category"]
    assert isinstance(categories, dict) and categories["bf16 matmul"]["calls_per_step"] > 0
    assert not torch.backends.cuda.cudnn_sdp_enabled()  # train.attention_kernels
    host = result["host"]
    assert isinstance(host, dict) and 0 < host["operators_ms_per_step"] <= host["wall_ms_per_step"]
    assert host["top_operators"][0]["calls_per_step"] > 0


@pytest.mark.slow
def test_a_runs_heads_are_in_the_profiled_step(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--device", "cpu", "--batch", "2", "--workers", "0", "--max-pixels", "28224"]
    heads = "--position-weight 1 --coordinate-weight 1 --pointer-weight 1 --kinds grounding"
    result = run_main(
        "profile_train",
        [*argv, "--warmup", "1", "--steps", "1", "--profiled-steps", "1", "--train", heads],
        capsys,
        TRAINING,
    )
    assert result["heads"] == ["position_labels", "coordinate_labels", "pointer_labels"]
    assert float(str(result["steps_per_s"])) > 0
