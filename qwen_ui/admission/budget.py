"""The request budget: a fraction of device memory (<= 1) or bytes (> 1), minus the
weights resident after loading; on the CPU, ``cpu_budget_bytes``."""

from __future__ import annotations

import torch

from qwen_ui.settings import Settings

# Until the weights are loaded and measured, assume they take their checkpoint size plus
# this much (AWQ's scales-and-zeros grow when repacked for the int4 kernel).
WEIGHT_OVERHEAD = 1.05


def device_limit(settings: Settings, device: torch.device) -> int:
    """Bytes this process may use on ``device`` for weights and requests together."""
    if device.type != "cuda":
        return settings.cpu_budget_bytes
    if settings.vram_budget > 1:
        return int(settings.vram_budget)
    total = torch.cuda.get_device_properties(device).total_memory
    return int(settings.vram_budget * total)


def request_budget(
    settings: Settings, device: torch.device, resident: int | None, weight_file_bytes: int
) -> int:
    """The budget for requests. ``resident``: bytes measured after loading (None before)."""
    limit = device_limit(settings, device)
    if device.type != "cuda":
        return limit
    weights = resident if resident is not None else int(weight_file_bytes * WEIGHT_OVERHEAD)
    return max(0, limit - weights)


def resident_bytes(device: torch.device) -> int:
    """Bytes allocated on ``device`` now (call with no request running: the weights)."""
    if device.type != "cuda":
        return 0
    return int(torch.cuda.memory_allocated(device))
