"""The request budget: device limit, resident weights, and the static-cache pool's share."""

from __future__ import annotations

from pathlib import Path

import torch

from qwen_ui.admission.budget import pool_reserve, request_budget
from qwen_ui.settings import Settings

MiB = 1024 * 1024
CPU = torch.device("cpu")


def settings(home: Path, **values: object) -> Settings:
    return Settings(home=home, cpu_budget_bytes=512 * MiB, **values)  # type: ignore[arg-type]


def test_the_cpu_budget_is_the_configured_bytes(tmp_path: Path) -> None:
    assert request_budget(settings(tmp_path), CPU, None, 10 * MiB) == 512 * MiB


def test_static_decoding_keeps_the_cache_pool_out_of_the_budget(tmp_path: Path) -> None:
    static = settings(tmp_path, decode_mode="static", static_cache_pool_bytes=100 * MiB)
    assert pool_reserve(static, CPU) == 100 * MiB
    assert request_budget(static, CPU, None, 0) == 412 * MiB
    auto = settings(tmp_path, decode_mode="auto", static_cache_pool_bytes=100 * MiB)
    assert pool_reserve(auto, CPU) == 0  # auto decodes eagerly on the CPU: no pool
    huge = settings(tmp_path, decode_mode="static", static_cache_pool_bytes=600 * MiB)
    assert request_budget(huge, CPU, None, 0) == 0
