"""Continuous batching: N clients asking at once against one client, through
``Engine.ask`` on a random Qwen2.5-VL architecture (AWQ layout), in one process.

    python bench/bench_batching.py [--clients 1,8] [--new-tokens 128] [--rounds 3]   # CPU, tiny
    python bench/bench_batching.py --device cuda --arch 7b --layers 8 --depth 8 --size 896

Each configuration runs ``--rounds`` times after one warm-up question: N clients arrive
together, each with one image of its own (``--size``, a PNG made before the clock starts)
and its own question; figures per
configuration: aggregate tok/s (every new token of every client over the wall time from
the arrival to the last client's ``done``; the median round), aggregate decode tok/s
(the tokens after each client's first, from the first client's first token to the last
client's ``done``), and time to first token p50/max. ``serial`` rows run the same N
clients through ``max_batch=1`` (one request at a time, the single-request loop; on CUDA
its fast path) for comparison. The ratio compares N clients with
one client at the default ``max_batch``. On CUDA the decode steps replay CUDA graphs
(``compile_decode``) and the peak allocated memory is reported. Prints one JSON document
on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from _checkpoints import ARCH, DirStore, arch_checkpoint
from PIL import Image

from qwen_ui.engine.engine import AskOptions, AskRequest, Engine
from qwen_ui.engine.events import Done, Token
from qwen_ui.settings import Settings
from qwen_ui.state import MemoryState

QUESTIONS = [
    "Describe the picture.",
    "What colours are there?",
    "How many shapes are in the image?",
    "Where is the largest object?",
    "What is in the top left corner?",
    "Is there a circle in the picture?",
    "Describe each object and its colour.",
    "What is the background like?",
]


def image(i: int, size: int) -> bytes:
    noise = Image.effect_noise((size, size), 40 + i).convert("RGB")
    buf = io.BytesIO()
    noise.save(buf, "PNG")
    return buf.getvalue()


def request_of(i: int, size: int, new_tokens: int) -> AskRequest:
    return AskRequest(
        "bench",
        QUESTIONS[i % len(QUESTIONS)],
        [image(i, size)],
        options=AskOptions(max_new_tokens=new_tokens),
    )


async def client(engine: Engine, request: AskRequest) -> dict[str, float]:
    start = time.perf_counter()
    first = 0.0
    async for event in engine.ask(request):
        if isinstance(event, Token) and not first:
            first = time.perf_counter()
        if isinstance(event, Done):
            end = time.perf_counter()
            count = event.completion_tokens
            return {"tokens": count, "ttft": first - start, "first": first, "end": end}
    raise RuntimeError("no answer")


async def round_of(engine: Engine, n: int, size: int, new_tokens: int, seed: int) -> dict[str, Any]:
    requests = [request_of(seed * 100 + i, size, new_tokens) for i in range(n)]
    start = time.perf_counter()  # the clients' images are made before the clock starts
    runs = await asyncio.gather(*(client(engine, request) for request in requests))
    wall = time.perf_counter() - start
    tokens = sum(r["tokens"] for r in runs)
    ttfts = sorted(r["ttft"] for r in runs)
    decoding = max(r["end"] for r in runs) - min(r["first"] for r in runs)
    return {
        "tok_s": tokens / wall,
        "decode_tok_s": (tokens - n) / decoding,
        "tokens": tokens,
        "wall_s": wall,
        "ttft_p50_s": statistics.median(ttfts),
        "ttft_max_s": ttfts[-1],
    }


async def configuration(
    checkpoint: Path, home: Path, n: int, max_batch: int, args: argparse.Namespace
) -> dict[str, Any]:
    cuda = args.device == "cuda"
    settings = Settings(
        home=home,
        device=args.device,
        max_batch=max_batch,
        max_new_tokens=args.new_tokens,
        embed_cache_bytes=0,
        compile_decode=cuda,
        prefill_dequant_rows=args.prefill_dequant_rows,
        # max_batch=1 on CUDA: the single-request fast path (static cache, compiled decode,
        # prefill graphs), for comparison
        decode_mode="static" if cuda and max_batch == 1 else "eager",
        prefill_graph_rows=4096 if cuda and max_batch == 1 else 0,
    )
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    engine = Engine(settings, DirStore(checkpoint), MemoryState())
    engine.start()
    try:
        await client(engine, request_of(10_000, args.size, 4))  # loads the model
        rounds = [
            await round_of(engine, n, args.size, args.new_tokens, r) for r in range(args.rounds)
        ]
    finally:
        await engine.close()
    best = sorted(rounds, key=lambda r: r["tok_s"])[len(rounds) // 2]
    row = {"clients": n, "max_batch": max_batch, **{k: round(v, 4) for k, v in best.items()}}
    if args.device == "cuda":
        row["peak_gib"] = round(torch.cuda.max_memory_allocated() / 1024**3, 3)
    return row


async def main(args: argparse.Namespace) -> dict[str, Any]:
    if args.threads:
        torch.set_num_threads(args.threads)
    name, checkpoint = arch_checkpoint(args.workdir, args.arch, args.layers, args.depth)
    home = Path(tempfile.mkdtemp(prefix="bench-batching-"))
    counts = [int(c) for c in args.clients.split(",")]
    rows = []
    for n in counts:
        rows.append(await configuration(checkpoint, home / f"b{n}", n, args.max_batch, args))
        if n > 1 and args.serial:
            rows.append(await configuration(checkpoint, home / f"s{n}", n, 1, args))
    one = next((r for r in rows if r["clients"] == 1), None)
    for row in rows:
        if one is not None:
            row["ratio_vs_one_client"] = round(row["tok_s"] / one["tok_s"], 2)
    return {
        "arch": name,
        "device": args.device,
        "torch_threads": torch.get_num_threads(),
        "new_tokens": args.new_tokens,
        "image_px": args.size,
        "rows": rows,
    }


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", default="1,8")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--arch", choices=sorted(ARCH), default="tiny")
    p.add_argument("--layers", type=int, default=None, help="decoder layers (default: arch's)")
    p.add_argument("--depth", type=int, default=None, help="vision blocks (default: arch's)")
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument(
        "--prefill-dequant-rows", type=int, default=256, help="AWQ: see the setting (0 = off)"
    )
    p.add_argument("--size", type=int, default=224, help="image side in pixels")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-batch", type=int, default=8)
    p.add_argument("--serial", action="store_true", help="also N clients at max_batch=1")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--workdir", type=Path, default=Path("artifacts/bench-decode"))
    return p.parse_args()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("qwen_ui.engine.decode_graphs").setLevel(logging.INFO)
    print(json.dumps(asyncio.run(main(parse())), indent=2))
