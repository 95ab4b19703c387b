"""Where a decode step's time goes: ``torch.profiler`` around steps of the engine's own
decode loop on the full-size Qwen2.5-VL-7B architecture (random weights, AWQ layout), by
kernel category, beside the memory-bandwidth bound measured in the same run.

    python bench/profile_decode.py                      # on the H200: static cache + CUDA graphs
    python bench/profile_decode.py --no-compile         # static cache, one launch per kernel
    python bench/profile_decode.py --device cpu --arch tiny --steps 8   # CPU dry run

The prompt is 32 text tokens; ``--warmup`` steps run (and compile) first, then ``--steps``
steps are profiled. Device time per step is the sum of kernel durations (CUDA) or of
operator self times (CPU); the wall time per step comes from the same steps, timed
without the profiler, one at a time (the host reads each token before the next step), and
``chained`` from as many steps queued back to back, each fed its token on the device, and
``loop`` from ``generate.run`` itself (each token also read by the host, as the engine
does). Prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from _checkpoints import DirStore, add_arch_options, arch_checkpoint
from _profiling import activities, device_events, profile_parser, summarise
from bench_decode import copy_bandwidth, decode_bytes
from torch.profiler import profile

from qwen_ui.engine.generate import CachePool, Generation, SamplingOptions, compiled_step, run
from qwen_ui.engine.pipelines import Loaded, ModelSpec, Pipelines, Turn
from qwen_ui.engine.status import EngineStatus

log = logging.getLogger("profile_decode")


def load(path: Path, device: str, compile_step: bool, fuse: bool) -> tuple[Loaded, Generation, Any]:
    spec = ModelSpec("bench/qwen2.5-vl-random", "awq", device, 3136, 1_003_520, 0, "batched", fuse)
    loaded = Pipelines(DirStore(path), spec, EngineStatus()).load()  # type: ignore[arg-type]
    model = loaded.language.model
    ids = loaded.language.tokenizer(" shape" * 32)["input_ids"][:32]
    prompt = loaded.language.build_prompt([Turn(loaded.language.decode(ids), 0)], [])
    step = compiled_step(model) if compile_step else None
    if device != "cuda":
        return loaded, Generation(model, prompt, SamplingOptions(4096)), model
    generation = Generation(model, prompt, SamplingOptions(4096), "static", CachePool(model), step)
    return loaded, generation, model


def run_steps(generation: Generation, token: int, n: int, device: torch.device) -> int:
    for _ in range(n):
        token = generation.step(token)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return token


def chained_steps(generation: Generation, token: int, n: int, device: torch.device) -> int:
    """``n`` steps each fed its token on the device (``Generation.advance``), queued without
    the host waiting between them: the device's pace when launches overlap the steps."""
    pending = generation.advance(token)
    for _ in range(n - 1):
        pending = generation.advance(pending)
    return pending.read()


def loop_ms(generation: Generation, n: int) -> float:
    """Milliseconds per token of ``generate.run``, the engine's own loop (each token read
    by the host, with the next steps queued as it does), over ``n`` tokens of a fresh
    request on the same model, pool and step; no stop token, cancelled after ``n``."""
    stamps: list[float] = []
    again = Generation(
        generation.model,
        generation.prompt,
        generation.options,
        generation.decode_mode,
        generation.pool,
        generation.step_forward,
    )
    run(again, [], lambda _t: stamps.append(time.perf_counter()), lambda: len(stamps) >= n)
    return (stamps[-1] - stamps[0]) * 1000 / (len(stamps) - 1)


def main(argv: list[str] | None = None) -> int:
    p = profile_parser(__doc__)
    add_arch_options(p)
    p.add_argument(
        "--compile", action=argparse.BooleanOptionalAction, default=torch.cuda.is_available()
    )
    p.add_argument(
        "--fuse", action=argparse.BooleanOptionalAction, default=True, help="fused projections"
    )
    p.add_argument("--warmup", type=int, default=16)
    p.add_argument("--steps", type=int, default=32)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    name, path = arch_checkpoint(args.workdir, args.arch)
    graphs = args.compile and device.type == "cuda"
    _, generation, model = load(path, args.device, graphs, args.fuse)
    token = generation.prefill()
    token = run_steps(generation, token, args.warmup, device)
    t0 = time.perf_counter()
    token = run_steps(generation, token, args.steps, device)
    wall_ms = (time.perf_counter() - t0) * 1000 / args.steps
    t0 = time.perf_counter()
    token = chained_steps(generation, token, args.steps, device)
    chained_ms = (time.perf_counter() - t0) * 1000 / args.steps
    with profile(activities=activities(device)) as prof:
        run_steps(generation, token, args.steps, device)
    bandwidth = copy_bandwidth(device)
    step_bytes = decode_bytes(model)
    result = {
        "command": "python bench/profile_decode.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "arch": name,
        "compile": bool(graphs),
        "fuse_projections": args.fuse,
        "wall_ms_per_step": round(wall_ms, 3),
        "tok_s": round(1000 / wall_ms, 1),
        "chained_ms_per_step": round(chained_ms, 3),
        "chained_tok_s": round(1000 / chained_ms, 1),
        "bytes_per_step": step_bytes,
        "bound_ms_per_step": round(step_bytes / bandwidth * 1000, 3),
        **summarise(device_events(prof, device), args.steps),
    }
    generation.release()  # its cache back to the pool: the loop's request takes it again
    loop_ms(generation, args.steps)  # warm
    loop = loop_ms(generation, args.steps)
    result.update(loop_ms_per_token=round(loop, 3), loop_tok_s=round(1000 / loop, 1))
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
