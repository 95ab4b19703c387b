"""The weights ledger: the weights limit, counting, and the budget left to requests."""

from __future__ import annotations

from pathlib import Path

from qwen_ui.admission import budget as budgets
from qwen_ui.admission.controller import AdmissionController
from qwen_ui.engine.shapes import Placement
from qwen_ui.models.memory import WeightLedger, checkpoint_bytes, weights_limit
from qwen_ui.settings import Settings

GiB = 1024**3
CUDA = Placement("cuda", static_decode=False, cache_bucket=0, graph_rows=0)
CPU = Placement("cpu", static_decode=False, cache_bucket=0, graph_rows=0)


def ledger(settings: Settings, where: Placement) -> tuple[WeightLedger, AdmissionController]:
    line = AdmissionController(0, queue_max=4, timeout_s=1)
    return WeightLedger(settings, where, line), line


def test_the_weights_limit(tmp_path: Path) -> None:
    on_gpu = Settings(home=tmp_path, vram_budget=40 * GiB)
    assert weights_limit(on_gpu, CUDA) == 30 * GiB  # a quarter stays for requests
    assert weights_limit(Settings(home=tmp_path), CPU) is None
    explicit = Settings(home=tmp_path, model_memory_bytes=5 * GiB)
    assert weights_limit(explicit, CPU) == weights_limit(explicit, CUDA) == 5 * GiB


def test_every_loaded_models_weights_leave_the_request_budget(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, vram_budget=40 * GiB)
    weights, line = ledger(settings, CUDA)
    weights.add(1, weights.estimate(8 * GiB))
    weights.add(2, weights.estimate(4 * GiB))
    assert weights.total == int(8 * GiB * budgets.WEIGHT_OVERHEAD) + int(
        4 * GiB * budgets.WEIGHT_OVERHEAD
    )
    assert line.budget == 40 * GiB - weights.total
    assert weights.fits(10 * GiB) and not weights.fits(20 * GiB)
    weights.remove(1)
    assert line.budget == 40 * GiB - int(4 * GiB * budgets.WEIGHT_OVERHEAD)
    weights.remove(2)
    assert line.budget == 40 * GiB


def test_a_measurement_counts_only_when_the_model_is_alone(tmp_path: Path) -> None:
    weights, line = ledger(Settings(home=tmp_path, vram_budget=40 * GiB), CUDA)
    weights.add(1, 8 * GiB)
    weights.add(2, 4 * GiB)
    weights.observed(2, None, 13 * GiB)  # includes model 1's weights: not model 2's size
    assert weights.total == 12 * GiB
    weights.remove(1)
    weights.observed(2, None, 5 * GiB)
    assert weights.total == 5 * GiB and line.budget == 35 * GiB


def test_on_the_cpu_the_request_budget_is_its_own(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, model_memory_bytes=2 * GiB)
    weights, line = ledger(settings, CPU)
    weights.add(1, weights.estimate(GiB))
    assert weights.total == GiB and line.budget == settings.cpu_budget_bytes


def test_checkpoint_bytes_count_weight_files_only(tmp_path: Path) -> None:
    (tmp_path / "model-1.safetensors").write_bytes(b"x" * 10)
    (tmp_path / "pytorch_model.bin").write_bytes(b"x" * 5)
    (tmp_path / "config.json").write_bytes(b"{}" * 50)
    assert checkpoint_bytes(tmp_path) == 15
