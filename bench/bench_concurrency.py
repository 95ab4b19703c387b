"""Many users at once: the engine (``Engine.ask``, default settings, admission in front)
and a stock peer (transformers ``generate``, batched, static cache) in one run.

    python bench/bench_concurrency.py                      # H200: 7B architecture, AWQ layout
    python bench/bench_concurrency.py --arch qwen3-8b      # H200: Qwen3-VL-8B architecture
    python bench/bench_concurrency.py --a10                # 22 GiB profile: 16 and 32 users
    python bench/bench_concurrency.py --arch tiny --device cpu --users 1,8 --new-tokens 16

For each N of ``--users`` the N users arrive together, and for each N of
``--poisson-users`` as a Poisson stream of ``--rate`` users a second; each user asks one
question with 1-3 images (``--min-images``/``--max-images``, of ``--size``: one size
for all, or ``varied``, each image's sides drawn from 320-1600 px, ``varied:LO-HI`` from
another range, so that the engine meets sizes it has not seen, as it does in use) and
``--new-tokens`` new tokens. Figures per run: aggregate decode tok/s (every new token,
from the first user's first token to the last user's last), time to first token p50/p95
(from each user's arrival), inter-token latency p95 (gaps between a user's consecutive
tokens), peak device memory (CUDA: ``max_memory_allocated``; CPU: the process's max RSS),
CUDA out-of-memory errors and the outcomes. The engine starts as a server does: the
model loads and the warm-up question runs (``preload``: on CUDA by default) before the
first user arrives; its start-up seconds and the first question's time to first token
after ready are reported too. The stock peer runs the same users (arriving together) as
one batched ``generate`` call each on the same weights dequantized to bf16
(``--stock-users``; ``--skip-stock`` leaves it out). ``--a10`` caps the engine's phase at
22 GiB (``torch.cuda.set_per_process_memory_fraction``, the admission budget taken from
it; the A10 profile of issue 31 is 16 and 32 users); the bar of every engine run is zero
CUDA OOM with every user answered. ``--peer dense_weight_share=0.25`` (settings as
``NAME=VALUE``, comma-separated) runs the engine's phase a second time in the same
process with those settings changed (``engine_peer``), for a comparison in one call;
``--peer-no-cudnn`` runs that second phase with cuDNN's attention turned off
(``torch.backends.cuda.enable_cudnn_sdp(False)``, the settings unchanged unless
``--peer`` changes them too): cuDNN builds an execution plan on the host for every new
attention shape, which ``--size varied`` brings. With varied sizes the second phase
draws from seeds of its own (sizes, arrivals, image counts, pixels), so that it does not
replay the sizes the first phase warmed up.
Prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import logging
import math
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from _checkpoints import A10_LIMIT, ARCH, DirStore, arch_checkpoint, limit_device_memory
from bench_decode import _free, _peak, _reset_peak, image_bytes, stock_model
from PIL import Image
from transformers import AutoProcessor

from qwen_ui.admission.seam import build
from qwen_ui.engine.engine import AskOptions, AskRequest, Engine
from qwen_ui.engine.events import Done, Failed, Token
from qwen_ui.engine.facts import placement
from qwen_ui.engine.warmup import start_up
from qwen_ui.settings import Settings
from qwen_ui.state import MemoryState

log = logging.getLogger("bench_concurrency")
GiB = 1024**3
QUESTION = "Describe each picture in detail: the objects, their colours and where they are."


@dataclass
class UserRun:
    """One user's question as it went: arrival, token times, outcome."""

    arrival: float
    images: int
    tokens: list[float] = field(default_factory=list)  # one stamp per new token
    outcome: str = "?"
    end: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)  # the done event's timings, s


# --- figures -------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (nearest rank); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def figures(runs: list[UserRun]) -> dict[str, Any]:
    """Aggregate decode tok/s, TTFT p50/p95, inter-token p95 (ms) and the median of each
    stage the engine timed (its done event's ``timings``, ms) of one run."""
    answered = [r for r in runs if r.tokens]
    ttft = [(r.tokens[0] - r.arrival) * 1000 for r in answered]
    gaps = [(b - a) * 1000 for r in answered for a, b in zip(r.tokens, r.tokens[1:], strict=False)]
    tokens = sum(len(r.tokens) for r in answered)
    span = max((r.tokens[-1] for r in answered), default=0.0) - min(
        (r.tokens[0] for r in answered), default=0.0
    )
    outcomes: dict[str, int] = {}
    for r in runs:
        outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
    names = sorted({name for r in runs for name in r.stages})
    stages = {
        name: _round(percentile([r.stages[name] * 1000 for r in runs if name in r.stages], 50))
        for name in names
    }
    return {
        "users": len(runs),
        "images": sum(r.images for r in runs),
        "new_tokens": tokens,
        "aggregate_tok_s": round(tokens / span, 1) if span > 0 else None,
        "ttft_ms_p50": _round(percentile(ttft, 50)),
        "ttft_ms_p95": _round(percentile(ttft, 95)),
        "inter_token_ms_p95": _round(percentile(gaps, 95)),
        "stages_ms_p50": stages,  # where the first token's wait went, per the engine
        "outcomes": outcomes,
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def arrivals(users: int, mode: str, rate: float, rng: random.Random) -> list[float]:
    """Seconds after the start at which each user arrives: all at 0, or a Poisson stream
    (exponential gaps of mean ``1 / rate``)."""
    if mode == "together":
        return [0.0] * users
    times, t = [], 0.0
    for _ in range(users):
        times.append(t)
        t += rng.expovariate(rate)
    return times


def image_counts(users: int, low: int, high: int, rng: random.Random) -> list[int]:
    return [rng.randint(low, high) for _ in range(users)]


# --- the engine ----------------------------------------------------------------------


def engine_settings(args: argparse.Namespace, **extra: Any) -> Settings:
    """The defaults, but for the bench's model, its image count and the queue."""
    values: dict[str, Any] = {
        "home": args.workdir / "home",
        "model_id": "bench/qwen2.5-vl-random",
        "model_revision": "awq",
        "device": args.device,
        "max_images": 8,
        "max_new_tokens": args.new_tokens,
        "queue_max": 1000,
        "queue_timeout_s": 3600,
    }
    values.update(extra)
    return Settings(**values)


async def started_engine(settings: Settings, path: Path) -> tuple[Engine, dict[str, Any]]:
    """The engine as a server starts it: model loaded and warmed up (``preload``) before
    the first user; then one question alone, its time to first token after ready."""
    admission = build(settings, placement(settings), tenant_limit=lambda _t: 1000)
    engine = Engine(settings, DirStore(path), MemoryState(), admission=admission)
    engine.start()
    t0 = time.perf_counter()
    if engine.fast_path.preload:
        await start_up(engine)
    ready_s = time.perf_counter() - t0
    rng = random.Random(7)
    first = UserRun(time.perf_counter(), 1)
    await _ask(engine, first, _request(settings.max_new_tokens, 1, rng, "first"))
    first_ttft = (first.tokens[0] - first.arrival) if first.tokens else None
    return engine, {
        "preload": engine.fast_path.preload,
        "decode_mode": engine.fast_path.decode_mode,
        "compile_decode": engine.fast_path.compile_decode,
        "prefill_graph_rows": engine.fast_path.prefill_graph_rows,
        "ready_s": round(ready_s, 1),
        "first_question_ttft_s": None if first_ttft is None else round(first_ttft, 3),
        "first_question_outcome": first.outcome,
    }


def _request(new_tokens: int, images: int, rng: random.Random, tenant: str) -> AskRequest:
    return AskRequest(
        tenant=tenant,
        question=QUESTION,
        images=[image_of(rng) for _ in range(images)],
        options=AskOptions(max_new_tokens=new_tokens, temperature=0.0),
        history=(),
    )


Size = tuple[str, tuple[int, int]]  # ("fixed", (W, H)) or ("varied", (LO, HI)): --size
SIZE: list[Size] = [("fixed", (1024, 768))]  # --size, set in main
PEER_SEEDS = 10**6  # with varied sizes the peer phase draws from seeds of its own


def image_of(rng: random.Random) -> bytes:
    """A noise JPEG of ``--size``: its one size, or sides drawn from its range."""
    form, (first, second) = SIZE[0]
    if form == "fixed":
        return image_bytes(rng, (first, second))
    return image_bytes(rng, (rng.randint(first, second), rng.randint(first, second)))


async def _ask(engine: Engine, run: UserRun, request: AskRequest) -> None:
    async for event in engine.ask(request):
        if isinstance(event, Token):
            now = time.perf_counter()
            run.tokens.extend([now] * (event.count - len(run.tokens)))  # count: so far
        elif isinstance(event, Done):
            run.outcome = "done"
            run.stages = dict(event.timings)
        elif isinstance(event, Failed):
            run.outcome = event.code
    run.end = time.perf_counter()


async def engine_run(
    engine: Engine, args: argparse.Namespace, users: int, mode: str, seed: int
) -> dict[str, Any]:
    rng = random.Random(seed)
    offsets = arrivals(users, mode, args.rate, rng)
    counts = image_counts(users, args.min_images, args.max_images, rng)
    requests = [_request(args.new_tokens, n, rng, f"tenant-{i % 4}") for i, n in enumerate(counts)]
    device = torch.device(args.device)
    ooms = _ooms(device)
    _reset_peak(device)
    start = time.perf_counter()
    runs = [UserRun(start + offset, n) for offset, n in zip(offsets, counts, strict=True)]

    async def user(run: UserRun, request: AskRequest) -> None:
        await asyncio.sleep(max(0.0, run.arrival - time.perf_counter()))
        run.arrival = time.perf_counter()
        await _ask(engine, run, request)

    await asyncio.gather(*(user(r, q) for r, q in zip(runs, requests, strict=True)))
    result = figures(runs)
    result.update(
        arrival=mode,
        peak_gib=round(_peak(device) / GiB, 3),
        cuda_ooms=_ooms(device) - ooms,
        seconds=round(time.perf_counter() - start, 2),
    )
    log.info("engine %s %d users: %s", mode, users, result)
    return result


def _ooms(device: torch.device) -> int:
    if device.type != "cuda":
        return 0
    return int(torch.cuda.memory_stats(device).get("num_ooms", 0))


async def engine_phase(
    args: argparse.Namespace, path: Path, changed: dict[str, str] | None = None, seeds: int = 0
) -> dict[str, Any]:
    """The engine started with ``changed`` settings, then every run of ``--users`` and
    ``--poisson-users``; ``seeds`` offsets the runs' random draws (arrivals, image counts,
    sizes, pixels)."""
    extra: dict[str, Any] = dict(changed or {})
    if args.a10:
        extra["vram_budget"] = float(A10_LIMIT)
    engine, startup = await started_engine(engine_settings(args, **extra), path)
    runs = []
    try:
        for n in args.users:
            runs.append(await engine_run(engine, args, n, "together", seed=seeds + n))
        for n in args.poisson_users:
            runs.append(await engine_run(engine, args, n, "poisson", seed=seeds + 1000 + n))
    finally:
        await engine.close()
    return {"startup": startup, "runs": runs}


# --- the stock peer ------------------------------------------------------------------


def stock_phase(args: argparse.Namespace, path: Path) -> list[dict[str, Any]]:
    """Each N users' questions as one batched ``generate`` (static cache, bf16, greedy,
    exactly ``--new-tokens`` each): all arrive together and wait for the batch. Each N is
    timed on its second call of the same shapes: ``generate`` compiles its static-cache
    step per batch shape, and the engine is timed warm too."""
    device = torch.device(args.device)
    model = stock_model(path, device, torch.bfloat16)
    processor = AutoProcessor.from_pretrained(path, local_files_only=True)
    processor.tokenizer.padding_side = "left"
    results = []
    try:
        for n in args.stock_users:
            rng = random.Random(n)
            counts = image_counts(n, args.min_images, args.max_images, rng)
            _stock_batch(model, processor, device, counts, args.new_tokens, random.Random(-n))
            _reset_peak(device)
            runs = _stock_batch(model, processor, device, counts, args.new_tokens, rng)
            result = figures(runs)
            result.update(arrival="together", peak_gib=round(_peak(device) / GiB, 3))
            log.info("stock %d users: %s", n, result)
            results.append(result)
    finally:
        model.to("meta")
        _free(device)
    return results


class _Stamps:
    """A ``generate`` streamer recording when each step's tokens arrive (the first call
    is the prompt)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if self._prompt_seen:
            self.times.append(time.perf_counter())
        self._prompt_seen = True

    def end(self) -> None:
        pass


def _stock_batch(
    model: Any, processor: Any, device: torch.device, counts: list[int], new: int, rng: Any
) -> list[UserRun]:
    images = [[_pil(image_of(rng)) for _ in range(n)] for n in counts]
    prompts = []
    for own in images:
        content: list[dict[str, Any]] = [{"type": "image"} for _ in own]
        content.append({"type": "text", "text": QUESTION})
        messages = [{"role": "user", "content": content}]
        prompts.append(processor.apply_chat_template(messages, add_generation_prompt=True))
    start = time.perf_counter()
    flat = [image for own in images for image in own]
    inputs = processor(text=prompts, images=flat, return_tensors="pt", padding=True).to(device)
    stamps = _Stamps()
    with torch.inference_mode():
        model.generate(
            **inputs,
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            cache_implementation="static",
            streamer=stamps,
        )
    end = time.perf_counter()
    return [UserRun(start, n, list(stamps.times), "done", end) for n in counts]


def _pil(data: bytes) -> Image.Image:
    return Image.open(io.BytesIO(data)).convert("RGB")


# --- main ----------------------------------------------------------------------------


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _settings(text: str) -> dict[str, str]:
    """``NAME=VALUE,...`` as settings to change (checked by :class:`Settings`)."""
    pairs = [item.split("=", 1) for item in text.split(",") if item]
    if any(len(pair) != 2 or pair[0] not in Settings.model_fields for pair in pairs):
        raise argparse.ArgumentTypeError(f"not NAME=VALUE of known settings: {text}")
    return dict(pairs)  # type: ignore[arg-type]


def _size(text: str) -> Size:
    """``WxH`` as ("fixed", (W, H)); ``varied`` or ``varied:LO-HI`` as ("varied", (LO, HI))."""
    try:
        if text == "varied":
            return "varied", (320, 1600)
        if text.startswith("varied:"):
            low, high = (int(x) for x in text.removeprefix("varied:").split("-"))
            if 28 <= low <= high:
                return "varied", (low, high)
        else:
            width, height = (int(x) for x in text.split("x"))
            if width > 0 and height > 0:
                return "fixed", (width, height)
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"not WxH, varied or varied:LO-HI: {text}")


@contextlib.contextmanager
def cudnn_attention(enabled: bool) -> Iterator[None]:
    """cuDNN's attention allowed or not (process-wide, as torch keeps it) for the block."""
    before = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(enabled)
    try:
        yield
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    cuda = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--arch", choices=sorted(ARCH), default="7b", help="see bench/_checkpoints.py")
    p.add_argument("--device", default="cuda" if cuda else "cpu")
    p.add_argument("--users", type=_ints, default=[1, 4, 8, 16, 32], help="arriving together")
    p.add_argument("--poisson-users", type=_ints, default=[16], help="arriving as a stream")
    p.add_argument("--rate", type=float, default=4.0, help="Poisson arrivals per second")
    p.add_argument("--stock-users", type=_ints, default=None, help="default: --users")
    p.add_argument("--skip-stock", action="store_true")
    p.add_argument("--min-images", type=int, default=1)
    p.add_argument("--max-images", type=int, default=3)
    p.add_argument(
        "--size",
        type=_size,
        default="1024x768",
        help="every image's size, WxH; or varied (each side 320-1600 px), varied:LO-HI",
    )
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument(
        "--a10", action="store_true", help="the engine capped at 22 GiB (the stock peer is not)"
    )
    p.add_argument("--peer", type=_settings, default={}, help="NAME=VALUE,... for a second run")
    p.add_argument(
        "--peer-no-cudnn",
        action="store_true",
        help="a second run with cuDNN's attention off (and --peer's settings, if any)",
    )
    p.add_argument("--workdir", type=Path, default=Path("artifacts/bench-decode"))
    args = p.parse_args(argv)
    if args.stock_users is None:
        args.stock_users = args.users
    return args


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    form, (first, second) = args.size
    SIZE[0] = args.size
    device = torch.device(args.device)
    t0 = time.perf_counter()
    name, path = arch_checkpoint(args.workdir, args.arch)
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "arch": name,
        "checkpoint_s": round(time.perf_counter() - t0, 1),
        "command": "python bench/bench_concurrency.py " + " ".join(sys.argv[1:]),
        "profile": "a10 (22 GiB)" if args.a10 else "full device",
        "new_tokens": args.new_tokens,
        "image_size": f"{first}x{second}" if form == "fixed" else f"varied {first}-{second}",
    }
    if args.a10 and device.type == "cuda":
        limit_device_memory(device, A10_LIMIT)
    result["engine"] = asyncio.run(engine_phase(args, path))
    phases = [result["engine"]]
    if args.peer or args.peer_no_cudnn:
        _free(device)
        cudnn = not args.peer_no_cudnn
        seeds = PEER_SEEDS if form == "varied" else 0
        with cudnn_attention(cudnn):
            peer = asyncio.run(engine_phase(args, path, args.peer, seeds))
        result["engine_peer"] = {"settings": args.peer, "cudnn_attention": cudnn, **peer}
        phases.append(peer)
    if not args.skip_stock:
        _free(device)
        if args.a10 and device.type == "cuda":
            torch.cuda.set_per_process_memory_fraction(1.0, device.index or 0)
        result["stock_generate_bf16_static"] = stock_phase(args, path)
    result["ok"] = all(
        r["cuda_ooms"] == 0 and set(r["outcomes"]) == {"done"}
        for phase in phases
        for r in phase["runs"]
    )
    return result


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    result = run_all(parse(argv))
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
