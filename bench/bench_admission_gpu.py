"""Admission benchmark: the memory estimate against the allocator's measured peak, then a
concurrent load under an "A10 profile", on the full-size Qwen2.5-VL-7B architecture with
random weights in the AutoAWQ layout (what the engine serves in production).

    python bench/bench_admission_gpu.py            # on the H200: both phases (~8 min)
    python bench/bench_admission_gpu.py --quick    # fewer cases and requests (~4 min)
    python bench/bench_admission_gpu.py --device cpu --arch tiny --quick   # CPU dry run

Phases (``--phase accuracy|load|all``):

* **accuracy**: requests of 1-8 images of assorted sizes (plus a text-only one), one at a
  time through ``Engine.ask``; for each, the measured peak (CUDA: ``max_memory_allocated``
  minus ``memory_allocated`` before the request; CPU: the profiler's allocation timeline
  of the engine's worker thread) beside admission's estimate for the same request. The
  bar: ``measured <= estimate <= 1.3 * measured`` for every request.
* **load**: the device limited to 22 GiB (``torch.cuda.set_per_process_memory_fraction``),
  the admission budget = 22 GiB minus the weights measured after loading; ``--requests``
  (>= 200) questions of random shapes from ``--concurrency`` (>= 16) clients of two tenants
  through the engine and the admission seam. The bar: zero CUDA out-of-memory errors
  (``num_ooms``), every request answered or refused with a typed busy error, the peak
  within 22 GiB and the controller's reserved bytes never above its budget.

The checkpoint (about 7 GB, random) is written once under ``--workdir`` (default
``artifacts/bench-admission``) and reused. Prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import io
import json
import logging
import random
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from _checkpoints import (
    A10_LIMIT,
    ARCH,
    DirStore,
    arch_checkpoint,
    limit_device_memory,
)
from PIL import Image

from qwen_ui.admission.seam import EngineAdmission, build
from qwen_ui.engine.engine import AskOptions, AskRequest, Engine
from qwen_ui.engine.events import Done, Failed
from qwen_ui.engine.facts import placement
from qwen_ui.settings import Settings
from qwen_ui.state import MemoryState

log = logging.getLogger("bench_admission")
GiB = 1024**3

# --- measuring -----------------------------------------------------------------------


class Meter:
    """Peak bytes allocated during a request, above what was allocated before it."""

    def __init__(self, engine: Engine, device: torch.device) -> None:
        self.engine = engine
        self.device = device

    @contextmanager
    def cuda(self) -> Iterator[Callable[[], int]]:
        torch.cuda.synchronize(self.device)
        before = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        peak: list[int] = []
        yield lambda: peak[0]
        torch.cuda.synchronize(self.device)
        peak.append(torch.cuda.max_memory_allocated(self.device) - before)

    async def measure(self, request: AskRequest) -> tuple[int, list[Any]]:
        if self.device.type == "cuda":
            with self.cuda() as peak:
                events = [e async for e in self.engine.ask(request)]
            return peak(), events
        return await self._cpu(request)

    async def _cpu(self, request: AskRequest) -> tuple[int, list[Any]]:
        """The profiler runs on the engine's worker thread (it records one thread)."""
        from torch.profiler import ProfilerActivity, profile

        prof = profile(
            activities=[ProfilerActivity.CPU],
            profile_memory=True,
            record_shapes=True,
            with_stack=True,
        )
        await self._on_worker(prof.__enter__)
        events = [e async for e in self.engine.ask(request)]
        await self._on_worker(lambda: prof.__exit__(None, None, None))
        return cpu_peak(prof), events

    async def _on_worker(self, fn: Callable[[], Any]) -> None:
        job = self.engine.worker.submit(lambda _job: fn())
        async for _ in job.events():
            pass


def cpu_peak(prof: Any) -> int:
    from torch.profiler._memory_profiler import Action

    live = peak = 0
    for _t, action, _key, size in prof._memory_profile().timeline:
        if action == Action.CREATE:
            live += size
        elif action == Action.DESTROY:
            live -= size
        peak = max(peak, live)
    return peak


# --- requests ------------------------------------------------------------------------

SIZES = [
    (224, 224),
    (640, 480),
    (1024, 768),
    (1280, 720),
    (1920, 1080),
    (800, 1200),
    (448, 1344),
    (3000, 2000),
    (300, 4000),
    (96, 96),
]


def image_bytes(size: tuple[int, int], rng: random.Random) -> bytes:
    """A noise JPEG (random content: no two images share a cache entry)."""
    width, height = size
    small = Image.frombytes("RGB", (32, 32), rng.randbytes(32 * 32 * 3))
    buf = io.BytesIO()
    small.resize((width, height), Image.Resampling.BILINEAR).save(buf, "JPEG", quality=85)
    return buf.getvalue()


def request_of(
    tenant: str, sizes: list[tuple[int, int]], max_new: int, rng: random.Random
) -> AskRequest:
    question = "Describe what differs between these pictures, in detail. " * rng.randint(1, 4)
    return AskRequest(
        tenant=tenant,
        question=question,
        images=[image_bytes(s, rng) for s in sizes],
        options=AskOptions(max_new_tokens=max_new),
    )


def accuracy_cases(quick: bool, rng: random.Random) -> list[tuple[list[tuple[int, int]], int]]:
    counts = [0, 1, 2, 4, 8] if quick else [0, 1, 2, 3, 4, 5, 6, 7, 8]
    cases = []
    for n in counts:
        sizes = [SIZES[(n + i * 3) % len(SIZES)] for i in range(n)]
        cases.append((sizes, rng.choice([16, 64, 256])))
    if not quick:  # decode-dominated: one small image, a long answer
        cases.append(([(224, 224)], 1024))
        cases.append(([SIZES[4]] * 8, 32))
    return cases


# --- the phases ----------------------------------------------------------------------


def settings_for(workdir: Path, device: str, **extra: Any) -> Settings:
    values: dict[str, Any] = {
        "home": workdir / "home",
        "model_id": "bench/qwen2.5-vl-random",
        "model_revision": "awq",
        "device": device,
        "max_images": 8,
        "max_image_pixels": 50_000_000,
        "embed_cache_bytes": 0,
        "max_new_tokens": 64,
        "max_new_tokens_limit": 2048,
        "queue_timeout_s": 600,
    }
    values.update(extra)
    return Settings(**values)


async def started(settings: Settings, path: Path) -> tuple[Engine, EngineAdmission]:
    admission = build(settings, placement(settings), tenant_limit=lambda t: 8)
    engine = Engine(settings, DirStore(path), MemoryState(), admission=admission)
    engine.start()
    return engine, admission


async def accuracy(args: argparse.Namespace, path: Path) -> dict[str, Any]:
    settings = settings_for(args.workdir, args.device, downscale_to_fit=False)
    engine, admission = await started(settings, path)
    device = torch.device(admission.placement.device)
    meter = Meter(engine, device)
    rng = random.Random(1)
    rows = []
    try:
        t0 = time.perf_counter()
        warm = await meter.measure(request_of("warm", [(640, 480)], 8, rng))
        load_s = time.perf_counter() - t0
        _expect_done(warm[1])
        for sizes, max_new in accuracy_cases(args.quick, rng):
            request = request_of("bench", sizes, max_new, rng)
            sized = admission.size(await engine.shape(request, sizes))
            measured, events = await meter.measure(request)
            done = _expect_done(events)
            rows.append(_row(sizes, max_new, sized, measured, done))
            log.info("accuracy %s", rows[-1])
    finally:
        await engine.close()
    ratios = [r["ratio"] for r in rows]
    return {
        "first_request_s": round(load_s, 1),
        "cases": rows,
        "min_ratio": min(ratios),
        "max_ratio": max(ratios),
        "ok": all(1.0 <= r <= 1.3 for r in ratios),
    }


def _row(sizes: Any, max_new: int, sized: Any, measured: int, done: Done) -> dict[str, Any]:
    est = sized.estimate
    return {
        "images": len(sizes),
        "sizes": [f"{w}x{h}" for w, h in sizes],
        "image_tokens": sized.shape.image_tokens,
        "prompt_tokens_est": sized.shape.prompt_tokens,
        "prompt_tokens": done.prompt_tokens,
        "max_new_tokens": max_new,
        "completion_tokens": done.completion_tokens,
        "estimate_mib": round(est.total / 2**20, 1),
        "measured_mib": round(measured / 2**20, 1),
        "ratio": round(est.total / max(1, measured), 3),
        "phase": est.peak_phase,
        "vision_mib": round(est.vision / 2**20, 1),
        "prefill_mib": round(est.prefill / 2**20, 1),
        "decode_mib": round(est.decode / 2**20, 1),
    }


def _expect_done(events: list[Any]) -> Done:
    last = events[-1]
    if not isinstance(last, Done):
        raise RuntimeError(f"request did not finish: {last}")
    return last


async def load(args: argparse.Namespace, path: Path) -> dict[str, Any]:
    device = torch.device(args.device)
    limit = A10_LIMIT if device.type == "cuda" else 512 * 2**20
    gc.collect()  # the accuracy phase's engine (and its copy of the weights) is gone
    if device.type == "cuda":
        torch.cuda.empty_cache()
        limit_device_memory(device, limit)
    settings = settings_for(
        args.workdir,
        args.device,
        vram_budget=float(limit),
        cpu_budget_bytes=limit,
        queue_max=args.concurrency,
        downscale_to_fit=True,
        prefill_dequant_rows=args.prefill_dequant_rows,
    )
    engine, admission = await started(settings, path)
    rng = random.Random(2)
    outcomes: dict[str, int] = {}
    try:
        _expect_done([e async for e in engine.ask(request_of("warm", [(640, 480)], 8, rng))])
        await engine.served_model()  # measures the resident weights, sets the budget
        ooms_before = _ooms(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        t0 = time.perf_counter()
        await _clients(engine, args, rng, outcomes)
        seconds = time.perf_counter() - t0
        peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
        ooms = _ooms(device) - ooms_before
    finally:
        await engine.close()
    c = admission.controller
    return {
        "requests": args.requests,
        "finished": sum(outcomes.values()),
        "concurrency": args.concurrency,
        "limit_gib": round(limit / GiB, 2),
        "budget_gib": round(c.budget / GiB, 3),
        "weights_gib": round((limit - c.budget) / GiB, 3),
        "max_reserved_gib": round(c.max_in_use / GiB, 3),
        "peak_allocated_gib": round(peak / GiB, 3),
        "cuda_ooms": ooms,
        "outcomes": outcomes,
        "seconds": round(seconds, 1),
        "ok": ooms == 0
        and c.max_in_use <= c.budget
        and peak <= limit
        and sum(outcomes.values()) == args.requests  # a deadline cut it short: not ok
        and set(outcomes) <= {"done", "busy_queue_full", "busy_wait_timeout"},
    }


async def _clients(
    engine: Engine, args: argparse.Namespace, rng: random.Random, outcomes: dict[str, int]
) -> None:
    """``args.requests`` requests from ``args.concurrency`` clients; past ``args.deadline_s``
    (when set) no client starts another, so a slow device still reports what it did."""
    todo = list(range(args.requests))
    t0 = time.perf_counter()

    def open_for_more() -> bool:
        late = args.deadline_s and time.perf_counter() - t0 > args.deadline_s
        return bool(todo) and not late

    async def client(index: int) -> None:
        tenant = ("tenant-a", "tenant-b")[index % 2]
        while open_for_more():
            todo.pop()
            count = rng.randint(0, 4)
            sizes = [(rng.randint(56, 1400), rng.randint(56, 1400)) for _ in range(count)]
            request = request_of(tenant, sizes, rng.choice([8, 16, 32]), rng)
            last = [e async for e in engine.ask(request)][-1]
            key = (
                "done" if isinstance(last, Done) else last.code if isinstance(last, Failed) else "?"
            )
            outcomes[key] = outcomes.get(key, 0) + 1
            finished = sum(outcomes.values())
            if key != "done" or finished % 10 == 0:
                _progress(finished, time.perf_counter() - t0, key, last)

    await asyncio.gather(*(client(i) for i in range(args.concurrency)))


def _progress(finished: int, elapsed: float, key: str, last: Any) -> None:
    timings = last.timings if isinstance(last, Done) else {}
    log.info("load: %d finished in %.1f s; last %s %s", finished, elapsed, key, timings)


def _ooms(device: torch.device) -> int:
    if device.type != "cuda":
        return 0
    return int(torch.cuda.memory_stats(device).get("num_ooms", 0))


# --- main ----------------------------------------------------------------------------


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer cases and requests")
    parser.add_argument("--phase", choices=["accuracy", "load", "all"], default="all")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--arch", choices=sorted(ARCH), default="7b")
    parser.add_argument("--layers", type=int, default=None, help="override decoder layers")
    parser.add_argument("--depth", type=int, default=None, help="override vision depth")
    parser.add_argument("--requests", type=int, default=None)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--prefill-dequant-rows",
        type=int,
        default=0,
        help="load phase: settings.prefill_dequant_rows (faster long prefills, more weights)",
    )
    parser.add_argument(
        "--deadline-s",
        type=float,
        default=0.0,
        help="load phase: start no request after this many seconds (0 = none)",
    )
    parser.add_argument("--workdir", type=Path, default=Path("artifacts/bench-admission"))
    args = parser.parse_args(argv)
    if args.requests is None:
        args.requests = 48 if args.quick else 200
    return args


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    name, path = arch_checkpoint(args.workdir, args.arch, args.layers, args.depth)
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "torch": torch.__version__,
        "arch": name,
        "checkpoint_s": round(time.perf_counter() - t0, 1),
        "command": "python bench/bench_admission_gpu.py " + " ".join(sys.argv[1:]),
    }
    if args.phase in ("accuracy", "all"):
        result["accuracy"] = await accuracy(args, path)
    if args.phase in ("load", "all"):
        result["load"] = await load(args, path)
    return result


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    args = parse(argv)
    result = asyncio.run(main_async(args))
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    phases = [result[k]["ok"] for k in ("accuracy", "load") if k in result]
    return 0 if all(phases) else 1


if __name__ == "__main__":
    sys.exit(main())
