"""The request budget: a fraction of device memory (<= 1) or bytes (> 1), minus the
weights resident after loading; on the CPU, ``cpu_budget_bytes``. With static decoding,
the idle KV caches the worker keeps for reuse (at most ``static_cache_pool_bytes``) are
not a request's, so that much is kept out of the budget too; so are the recorded prefills'
memory pool and staging buffers (``prefill_graph_rows``, once the model's shape is known).
"""

from __future__ import annotations

import torch

from qwen_ui.admission.estimate import eager_prefill
from qwen_ui.engine.shapes import ModelFacts, ModelShape, Placement
from qwen_ui.settings import Settings

# Until the weights are loaded and measured, assume they take their checkpoint size plus
# this much (AWQ's scales-and-zeros grow when repacked for the int4 kernel).
WEIGHT_OVERHEAD = 1.05


def device_limit(settings: Settings, where: Placement) -> int:
    """Bytes this process may use on its device for weights and requests together."""
    if where.device != "cuda":
        return settings.cpu_budget_bytes
    bytes_given = settings.vram_budget > 1  # then the device's size is not needed
    device = torch.device(where.device)
    total = 0 if bytes_given else torch.cuda.get_device_properties(device).total_memory
    return settings.vram_bytes(total)


def request_budget(
    settings: Settings,
    where: Placement,
    resident: int | None,
    expected_weights: int,
    shape: ModelShape | None = None,
) -> int:
    """The budget for requests. ``resident``: bytes measured after loading (None before,
    when ``expected_weights`` counts: :func:`expected_weights`)."""
    reserved = pool_reserve(settings, where) + graph_reserve(where, shape)
    limit = device_limit(settings, where) - reserved
    if where.device != "cuda":
        return max(0, limit)
    weights = resident if resident is not None else expected_weights
    return max(0, limit - weights)


def expected_weights(facts: ModelFacts) -> int:
    """The weights' bytes on the device before they are loaded and measured: the
    checkpoint's tensors with :data:`WEIGHT_OVERHEAD`, and the copies the engine keeps of
    its int4 weights."""
    return int(facts.weight_file_bytes * WEIGHT_OVERHEAD) + facts.copy_bytes


def pool_reserve(settings: Settings, where: Placement) -> int:
    """Bytes the decode worker may keep in idle static caches between requests."""
    kept = where.static_decode or where.batch_limit > 1  # a batch's idle slot cache too
    return settings.static_cache_pool_bytes if kept else 0


def graph_reserve(where: Placement, shape: ModelShape | None) -> int:
    """Bytes the recorded prefills may hold (:mod:`qwen_ui.engine.prefill_graphs`): the
    staging keys and values of their longest bucket (and Qwen3-VL's dense DeepStack
    buffer, ``layers × rows × hidden``); their shared pool, which holds at most that
    bucket's eager prefill transients (counted as a prompt of that many text tokens would
    be); and as much again for the eager pass that precedes each recording (it runs inside
    the first request of a new length bucket, beside the pool). 0 when none are recorded
    or before the model's shape is known."""
    rows = where.graph_rows
    if not rows or shape is None:
        return 0
    staging = shape.kv_bytes_per_token * rows
    staging += shape.vision.deepstack_layers * rows * shape.text.hidden * shape.dtype_bytes
    return staging + 2 * eager_prefill(rows, 0, shape)
