"""On the device: admission's estimate against the CUDA allocator's measured peak, on the
Qwen2.5-VL-7B architecture (random weights, AutoAWQ layout) served at the default
settings (static caches, compiled decode, recorded prefills, dequantized long prefills).
Fails when a code change moves memory use out of ``measured <= estimate <= 1.3 x
measured``, for single requests of 1-3 images of several sizes (and one prompt too long
to replay, which dequantizes) and for batches.

Each case runs twice with fresh images: the first run records its prefill length bucket
and compiles the decode step for its cache length (one-time costs kept out of the request
budget, :mod:`qwen_ui.admission.budget`); the second is measured, with the idle static
caches dropped first so that the request allocates its own. The measurement is
``max_memory_allocated`` minus ``memory_allocated`` before the request, with the request
stopped after a few tokens: a static cache is allocated whole before the prefill, so the
peak is reached by then.

Run there (the checkpoint, ~7 GB, is written once under ``QWEN_UI_GPU_WORKDIR``, default
``artifacts/bench-decode``; ``QWEN_UI_GPU_REPORT`` names a JSON file for the rows):

    python -m pytest tests/admission/test_estimate_gpu.py -m gpu -q --confcutdir=tests/admission
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import torch

from qwen_ui.admission.estimate import batch_total
from qwen_ui.admission.seam import EngineAdmission, build
from qwen_ui.engine.engine import AskOptions, AskRequest, Engine
from qwen_ui.engine.events import Failed, Token
from qwen_ui.engine.facts import placement
from qwen_ui.engine.shapes import Size
from qwen_ui.engine.warmup import start_up
from qwen_ui.settings import Settings
from qwen_ui.state import MemoryState
from tests.admission.conftest import noise

BENCH = Path(__file__).resolve().parents[2] / "bench"
WORKDIR = Path(os.environ.get("QWEN_UI_GPU_WORKDIR", "artifacts/bench-decode"))
TOKENS = 6  # tokens generated before the request is stopped
CACHE_STEP = 2048  # cache lengths are rounded to this, so few decode steps compile
LOW, HIGH = 1.0, 1.3

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.asyncio(loop_scope="module"),
]

SINGLES: list[list[Size]] = [
    [(224, 224)],
    [(640, 480)],
    [(1024, 768)],
    [(1920, 1080)],
    [(1024, 768), (800, 1200)],
    [(1280, 720), (448, 1344), (96, 96)],
    [(1920, 1080), (1920, 1080)],  # each downscaled to max_pixels (1,222 tokens)
    [(1024, 768)] * 5,  # 5,000+ prompt tokens: not replayed, dequantized
]
BATCHES: list[tuple[int, Size]] = [(4, (640, 480)), (8, (1024, 768))]
ROWS: list[dict[str, Any]] = []


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served() -> AsyncIterator[tuple[Engine, EngineAdmission]]:
    sys.path.insert(0, str(BENCH))
    from _checkpoints import DirStore, arch_checkpoint

    _, path = arch_checkpoint(WORKDIR, "7b")
    settings = Settings(
        home=WORKDIR / "home-estimate-gpu",
        model_id="bench/qwen2.5-vl-random",
        model_revision="awq",
        device="cuda",
        max_images=8,
        max_new_tokens=900,  # the warm-up's cache: 2,048 positions as the small cases
        max_new_tokens_limit=8192,  # room to round every case's cache up to CACHE_STEP
        queue_timeout_s=600,
    )
    admission = build(settings, placement(settings), tenant_limit=lambda _t: 64)
    engine = Engine(settings, DirStore(path), MemoryState(), admission=admission)
    engine.start()
    await start_up(engine)
    yield engine, admission
    await engine.close()
    report = os.environ.get("QWEN_UI_GPU_REPORT")
    if report:
        Path(report).write_text(json.dumps(ROWS, indent=2))


async def _sized(
    engine: Engine, admission: EngineAdmission, sizes: list[Size], rng: random.Random
) -> tuple[AskRequest, Any]:
    """A request whose static cache is a multiple of :data:`CACHE_STEP` long, and its
    estimate."""
    probe = _request(sizes, 1, rng)
    prompt = admission.size(await engine.shape(probe, sizes)).shape.prompt_tokens
    cache = -(-(prompt + 64) // CACHE_STEP) * CACHE_STEP
    request = _request(sizes, cache - prompt, rng)
    return request, admission.size(await engine.shape(request, sizes))


def _request(sizes: list[Size], max_new: int, rng: random.Random) -> AskRequest:
    return AskRequest(
        tenant="gpu",
        question="Describe the pictures.",
        images=[noise(size, rng.randrange(1 << 30)) for size in sizes],
        options=AskOptions(max_new_tokens=max_new),
        history=(),
    )


async def _until_tokens(engine: Engine, request: AskRequest, started: asyncio.Event) -> None:
    """Ask, and stop after :data:`TOKENS` tokens (closing the iterator cancels the work)."""
    events = engine.ask(request)
    try:
        async for event in events:
            if isinstance(event, Failed):
                raise AssertionError(f"request failed: {event}")
            if isinstance(event, Token) and event.count >= TOKENS:
                started.set()
                return
    finally:
        await events.aclose()


async def _drop_idle_caches(engine: Engine) -> None:
    """The worker's idle static caches (or a batch's idle slot cache), dropped on the
    worker (the next request allocates its own, as admission assumes)."""

    def drop(_job: Any) -> None:
        pool = getattr(getattr(engine, "_decoder", None), "pool", None)
        if pool is not None:
            pool.clear()
        batch = getattr(engine, "batch", None)  # continuous batching: its idle slot cache
        if batch is not None and not batch.busy:
            batch.cache.clear()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()

    async for _ in engine.worker.submit(drop).events():
        pass


async def _measured(engine: Engine, requests: list[AskRequest]) -> int:
    await _drop_idle_caches(engine)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    flags = [asyncio.Event() for _ in requests]
    await asyncio.gather(
        *(_until_tokens(engine, r, f) for r, f in zip(requests, flags, strict=True))
    )
    await _drop_idle_caches(engine)  # waits for the worker, then reads the peak
    return int(torch.cuda.max_memory_allocated()) - before


def _row(kind: str, sizes: Any, sized: Any, estimate: int, measured: int) -> dict[str, Any]:
    row = {
        "kind": kind,
        "sizes": sizes,
        "prompt_tokens": sized.shape.prompt_tokens,
        "image_tokens": sized.shape.image_tokens,
        "max_new_tokens": sized.shape.max_new_tokens,
        "estimate_mib": round(estimate / 2**20, 1),
        "measured_mib": round(measured / 2**20, 1),
        "ratio": round(estimate / max(1, measured), 3),
        "vision_mib": round(sized.estimate.vision / 2**20, 1),
        "prefill_mib": round(sized.estimate.prefill / 2**20, 1),
        "decode_mib": round(sized.estimate.decode / 2**20, 1),
    }
    ROWS.append(row)
    print(json.dumps(row))
    return row


@pytest.mark.parametrize("sizes", SINGLES, ids=lambda s: "+".join(f"{w}x{h}" for w, h in s))
async def test_single_request_estimate_tracks_the_peak(
    served: tuple[Engine, EngineAdmission], sizes: list[Size]
) -> None:
    engine, admission = served
    rng = random.Random(len(ROWS))
    first, _ = await _sized(engine, admission, sizes, rng)
    first_peak = await _measured(engine, [first])  # records and compiles what it needs
    request, sized = await _sized(engine, admission, sizes, rng)
    measured = await _measured(engine, [request])
    row = _row("single", [f"{w}x{h}" for w, h in sizes], sized, sized.estimate.total, measured)
    row["first_run_measured_mib"] = round(first_peak / 2**20, 1)
    assert LOW <= row["ratio"] <= HIGH, row


@pytest.mark.parametrize(("users", "size"), BATCHES, ids=lambda v: str(v))
async def test_batch_estimate_tracks_the_peak(
    served: tuple[Engine, EngineAdmission], users: int, size: Size
) -> None:
    engine, admission = served
    if not hasattr(engine.settings, "max_batch"):
        pytest.skip("the worker runs one request at a time: no batch to measure")
    rng = random.Random(100 + users)
    warm = [(await _sized(engine, admission, [size], rng))[0] for _ in range(users)]
    await _measured(engine, warm)
    pairs = [await _sized(engine, admission, [size], rng) for _ in range(users)]
    measured = await _measured(engine, [request for request, _ in pairs])
    estimate = batch_total([sized.shape for _, sized in pairs], admission.facts.shape)
    row = _row(f"batch of {users}", [f"{size[0]}x{size[1]}"], pairs[0][1], estimate, measured)
    assert LOW <= row["ratio"] <= HIGH, row
