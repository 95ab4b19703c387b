"""CPU latency of the shapes demo model: one question about one 336 x 336 px image.

    python bench/bench_demo_latency.py [--runs 20] [--revision bf16|awq] [--path engine|generate]

``engine`` (default): the demo installed into a temporary store, ``Engine.ask`` from
request to ``done`` (image decoding, vision encoding with the cache missed: every run asks
about a different scene, prompt, greedy generation), as the app serves it on a laptop.
``generate``: plain transformers ``generate`` through ``qwen_ui.demo.answer`` (fp32).
One warm-up question first; prints one JSON object with p50/p90/mean/min/max seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from qwen_ui.demo import scenes


def question(i: int) -> scenes.Sample:
    """A single-image held-out question whose scene is redrawn at 336 x 336 px."""
    kinds = ("count", "total", "colour", "shape", "exists", "spatial")
    sample = scenes.sample(
        scenes.HELD_OUT_BASE + 900_000 + i, kinds[i % len(kinds)], scenes.LANGS[i % 2]
    )
    scene = sample.scenes[0]
    sx, sy = 336 / scene.width, 336 / scene.height
    k = min(sx, sy)
    shapes = tuple(replace(s, cx=s.cx * sx, cy=s.cy * sy, r=s.r * k) for s in scene.shapes)
    return replace(sample, scenes=(replace(scene, width=336, height=336, shapes=shapes),))


def engine_runner(revision: str) -> tuple[Callable[[int], str], Callable[[], None]]:
    from qwen_ui.demo.install import install_demo
    from qwen_ui.engine.engine import AskRequest, Engine
    from qwen_ui.engine.events import Done
    from qwen_ui.settings import Settings
    from qwen_ui.state import MemoryState
    from qwen_ui.store import ModelStore

    home = Path(tempfile.mkdtemp(prefix="bench-demo-"))
    store = ModelStore(home / "models")
    install_demo(store, (revision,))
    settings = Settings(home=home, model_revision=revision, device="cpu", max_new_tokens=8)
    loop = asyncio.new_event_loop()
    engine = Engine(settings, store, MemoryState())
    engine.start()

    async def ask(i: int) -> str:
        sample = question(i)
        events = [
            e
            async for e in engine.ask(AskRequest("bench", sample.question, sample.png_bytes()[:1]))
        ]
        done = events[-1]
        assert isinstance(done, Done), done
        return done.answer

    def close() -> None:
        loop.run_until_complete(engine.close())
        loop.close()

    return (lambda i: loop.run_until_complete(ask(i))), close


def generate_runner(revision: str) -> tuple[Callable[[int], str], Callable[[], None]]:
    from qwen_ui.demo.answer import answer_batch, load_bf16, load_processor
    from qwen_ui.demo.awq_ref import load_awq_dequantized
    from qwen_ui.demo.install import weights_dir

    path = weights_dir(revision)
    load = load_awq_dequantized if revision == "awq" else load_bf16
    model, processor = load(path, torch.float32), load_processor(path)

    def ask(i: int) -> str:
        sample = question(i)
        return answer_batch(model, processor, [(sample.images(), sample.question)])[0]

    return ask, lambda: None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--revision", choices=("bf16", "awq"), default="bf16")
    parser.add_argument("--path", choices=("engine", "generate"), default="engine")
    args = parser.parse_args()
    runner = engine_runner if args.path == "engine" else generate_runner
    started = time.perf_counter()
    ask, close = runner(args.revision)
    load_s = time.perf_counter() - started
    ask(10_000)  # warm-up
    seconds = []
    for i in range(args.runs):
        t0 = time.perf_counter()
        ask(i)
        seconds.append(time.perf_counter() - t0)
    close()
    seconds.sort()
    print(
        json.dumps(
            {
                "bench": "demo_latency",
                "path": args.path,
                "revision": args.revision,
                "image": "336x336",
                "runs": args.runs,
                "cpus": os.cpu_count(),
                "torch_threads": torch.get_num_threads(),
                "load_s": round(load_s, 2),
                "p50_s": round(statistics.median(seconds), 3),
                "p90_s": round(seconds[int(0.9 * (len(seconds) - 1))], 3),
                "mean_s": round(statistics.fmean(seconds), 3),
                "min_s": round(seconds[0], 3),
                "max_s": round(seconds[-1], 3),
                "loadavg_1m": round(os.getloadavg()[0], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
