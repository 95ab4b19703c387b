"""What ``auto`` means for the decode path on each device, and what an explicit setting
overrides."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from qwen_ui.engine.facts import placement
from qwen_ui.engine.fastpath import CUDA_PREFILL_GRAPH_ROWS, FastPath, fast_path
from qwen_ui.engine.prefill_graphs import bucket_rows
from qwen_ui.settings import Settings


def test_defaults_are_auto(tmp_path: Path) -> None:
    s = Settings(home=tmp_path)
    assert (s.decode_mode, s.compile_decode, s.prefill_graph_rows, s.preload) == ("auto",) * 4


def test_auto_is_the_fast_path_on_cuda(tmp_path: Path) -> None:
    path = fast_path(Settings(home=tmp_path), "cuda")
    assert path == FastPath("static", True, CUDA_PREFILL_GRAPH_ROWS, True)


def test_auto_is_the_safe_path_on_the_cpu(tmp_path: Path) -> None:
    assert fast_path(Settings(home=tmp_path), "cpu") == FastPath("eager", False, 0, False)


@pytest.mark.parametrize(
    ("extra", "device", "expected"),
    [
        ({"compile_decode": False}, "cuda", FastPath("static", False, 4096, True)),
        ({"prefill_graph_rows": 0}, "cuda", FastPath("static", True, 0, True)),
        ({"prefill_graph_rows": 1000}, "cuda", FastPath("static", True, 1000, True)),
        ({"preload": False}, "cuda", FastPath("static", True, 4096, False)),
        # recorded prefills need a static cache on CUDA; compiled steps need CUDA
        (
            {"decode_mode": "eager", "compile_decode": True},
            "cuda",
            FastPath("eager", True, 0, True),
        ),
        (
            {"decode_mode": "static", "compile_decode": True},
            "cpu",
            FastPath("static", False, 0, False),
        ),
        ({"prefill_graph_rows": 512}, "cpu", FastPath("eager", False, 0, False)),
        ({"preload": True}, "cpu", FastPath("eager", False, 0, True)),
    ],
)
def test_an_explicit_setting_wins(
    tmp_path: Path, extra: dict[str, object], device: str, expected: FastPath
) -> None:
    assert fast_path(Settings(home=tmp_path, **extra), device) == expected  # type: ignore[arg-type]


def test_environment_reads_auto_booleans_and_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QWEN_UI_COMPILE_DECODE", "false")
    monkeypatch.setenv("QWEN_UI_PREFILL_GRAPH_ROWS", "2048")
    monkeypatch.setenv("QWEN_UI_PRELOAD", "auto")
    s = Settings(home=tmp_path)
    assert (s.compile_decode, s.prefill_graph_rows, s.preload) == (False, 2048, "auto")
    with pytest.raises(ValueError, match="prefill_graph_rows"):
        Settings(home=tmp_path, prefill_graph_rows=-1)


def test_placement_follows_the_resolved_path(tmp_path: Path) -> None:
    s = Settings(home=tmp_path, max_batch=1)  # type: ignore[call-arg]  # one at a time
    cuda = placement(s, torch.device("cuda"))
    assert (cuda.static_decode, cuda.graph_rows) == (True, bucket_rows(CUDA_PREFILL_GRAPH_ROWS))
    cpu = placement(s, torch.device("cpu"))
    assert (cpu.static_decode, cpu.cache_bucket, cpu.graph_rows) == (False, 0, 0)
