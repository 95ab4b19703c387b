"""``training/bench_train_step.py`` on the CPU: the workers' rate, then eager and compiled
steps from one fresh model on resident batches, which train alike."""

from __future__ import annotations

import pytest

from tests.bench.support import run_main
from training.tests.support import TRAINING


@pytest.mark.slow
@pytest.mark.filterwarnings(  # dynamo's own, while tracing (hidden outside pytest)
    "ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning"
)
def test_eager_and_compiled_steps_are_timed_from_one_model(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--device", "cpu", "--batches", "2", "--workers", "0", "--max-pixels", "28224"]
    argv += ["--steps", "1", "--warmup", "2", "--data-skip", "1", "--data-batches", "2"]
    result = run_main("bench_train_step", argv, capsys, TRAINING)
    assert result["device"] == "cpu"
    assert str(result["command"]).startswith("python training/bench_train_step.py --device cpu")
    (row,) = result["rows"]  # type: ignore[misc]
    assert row["batch"] == 2 and row["data_samples_per_s"] > 0
    assert row["eager"]["steps_per_s"] > 0 and row["compiled"]["steps_per_s"] > 0
    assert row["first_losses"]["eager"][0] > 1.0  # a fresh model, near chance
    assert row["max_loss_diff"] < 1e-4


def test_the_workers_rate_alone(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--device", "cpu", "--batches", "2", "--workers", "0", "--max-pixels", "28224"]
    argv += ["--data-only", "--data-skip", "1", "--data-batches", "2"]
    (row,) = run_main("bench_train_step", argv, capsys, TRAINING)["rows"]  # type: ignore[misc]
    assert set(row) == {"batch", "data_samples_per_s"} and row["data_samples_per_s"] > 0
