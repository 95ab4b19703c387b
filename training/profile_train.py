"""Where a demo-model training step's time goes (``training.train``): wall time per
step and the share spent waiting for data, the host synchronisations a step makes (CUDA's
sync debug mode, grouped by the calling line), and ``torch.profiler`` kernel categories.

    python training/profile_train.py                    # on the GPU, the shipped weights
    python training/profile_train.py --train "--compile --pointer-weight 1"  # a run's options
    python training/profile_train.py --device cpu --batch 4 --workers 0 --max-pixels 28224 \
        --warmup 1 --steps 2                         # CPU dry run

A training step of this 12 M-parameter model ran at 7.4-7.8 steps/s of 160 samples on the
H200 with the loader waiting 5 % of the time (training/NOTES.md), so the step itself is
the limit: this says whether launches, host syncs or kernels set it. With ``--compile``
among a run's options it also counts the graphs Dynamo compiled during the warm-up and
during the timed steps (recompiles there mean new shapes keep coming: runs 42 to 45 took
0.4 s a step from step 50 to about 500 and 0.22 s after, run 41 0.105 s throughout;
run 45's step profiled on the H200 took 0.72 and 1.25 s a step on two hosts with no
recompiles and 70 ms of kernels: the host set the pace, in cuDNN's attention, now off in
training: ``train.attention_kernels``). ``host`` says how much of a profiled step's wall
time the host's operators take, and which. Prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
from torch.profiler import ProfilerActivity, profile

from bench._profiling import device_events, profile_parser, provenance, summarise
from training import train

log = logging.getLogger("profile_train")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p: argparse.ArgumentParser = profile_parser(__doc__)
    p.add_argument("--init", type=Path, default=train.WEIGHTS)
    p.add_argument("--batch", type=int, default=160)
    p.add_argument("--workers", type=int, default=14)
    p.add_argument("--max-pixels", type=int, default=None)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument(
        "--profiled-steps",
        type=int,
        default=5,
        help="steps run under torch.profiler for the kernel categories (its trace grows "
        "with every step; the timing comes from --steps)",
    )
    p.add_argument(
        "--train",
        default="",
        help="more train.py options, one shell word (e.g. a run's heads and --compile): "
        "the step runs with the heads and compiled parts they ask for",
    )
    return p.parse_args(argv)


def training_args(args: argparse.Namespace, out: str) -> argparse.Namespace:
    """train.py's own options (and defaults) for this run."""
    argv = ["--out", out, "--batch", str(args.batch), "--workers", str(args.workers)]
    argv += ["--device", args.device, "--init", str(args.init)]
    if args.max_pixels:
        argv += ["--max-pixels", str(args.max_pixels)]
    return train.parse_args([*argv, *shlex.split(args.train)])


class Steps:
    """The training run's pieces, as ``train.run`` builds them, stepped one by one."""

    def __init__(self, args: argparse.Namespace, device: torch.device) -> None:
        self.device = device
        self.model = train.build_model(device, args.init)
        self.attention = train.BatchedAttention(self.model)
        self.attention.enable(True)
        hidden = self.model.config.text_config.hidden_size
        self.aux = train.AuxHead(
            hidden, args.aux_weight, args.relation_weight, args.rank_weight
        ).to(device)
        self.heads = train.language_heads(args, hidden, device, self.model)
        if args.compile:
            train.compile_parts(self.model)
        self.opt = train.make_optimizer(
            self.model, 1e-4, args.weight_decay, self.aux, args.vision_lr_mult, self.heads
        )
        self.batches = iter(train.scene_loader(args, device))
        self.model.train()

    def run(self, n: int) -> tuple[float, float]:
        """``n`` steps; (wall seconds, seconds spent waiting for batches)."""
        wait = 0.0
        t0 = time.perf_counter()
        for _ in range(n):
            t1 = time.perf_counter()
            batch = train.to_device(next(self.batches), self.device)
            wait += time.perf_counter() - t1
            train.train_step(self.model, self.opt, batch, self.attention, self.aux, self.heads)
        self.sync()
        return time.perf_counter() - t0, wait

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def host_syncs(steps: Steps, n: int) -> dict[str, Any] | None:
    """Synchronising CUDA calls in ``n`` steps, by calling line (None off CUDA)."""
    if steps.device.type != "cuda":
        return None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            steps.run(n)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    where = Counter(f"{Path(w.filename).name}:{w.lineno}" for w in caught)
    return {
        "per_step": round(sum(where.values()) / n, 1),
        "by_line": [{"where": k, "per_step": v / n} for k, v in where.most_common(12)],
    }


def host_summary(prof: Any, wall: float, steps: int) -> dict[str, Any]:
    """Where the host's time goes during the profiled steps: the operators' own CPU time
    per step (the launches, autograd and Python's share is the rest of the wall time)
    and the operators taking most of it."""
    ops = [(e.key, e.self_cpu_time_total, e.count) for e in prof.key_averages()]
    own = sum(us for _, us, _ in ops)
    top = sorted(ops, key=lambda op: -op[1])[:15]
    return {
        "wall_ms_per_step": round(wall * 1000 / steps, 1),
        "operators_ms_per_step": round(own / 1000 / steps, 1),
        "operator_calls_per_step": round(sum(n for _, _, n in ops) / steps, 1),
        "top_operators": [
            {"name": name, "ms_per_step": round(us / 1000 / steps, 2), "calls_per_step": n / steps}
            for name, us, n in top
        ],
    }


def compiled_graphs() -> int:
    """Graphs Dynamo has compiled in this process so far."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = True  # as train.run sets it
    train.attention_kernels()
    with tempfile.TemporaryDirectory() as out:
        before = compiled_graphs()  # the process may have compiled others (tests)
        steps = Steps(training_args(args, out), device)
        steps.run(args.warmup)
        after_warmup = compiled_graphs()
        wall, wait = steps.run(args.steps)
        timed_graphs = compiled_graphs() - after_warmup
        warmup_graphs = after_warmup - before
        timing = {
            "steps_per_s": round(args.steps / wall, 2),
            "samples_per_s": round(args.steps * args.batch / wall, 1),
            "data_wait_share": round(wait / wall, 3),
            "graphs_compiled": {"warmup": warmup_graphs, "timed_steps": timed_graphs},
        }
        log.info("timed steps: %s", json.dumps(timing))  # kept if the profile runs out
        syncs = host_syncs(steps, 2)
        activities = [ProfilerActivity.CPU]
        activities += [ProfilerActivity.CUDA] if device.type == "cuda" else []
        with profile(activities=activities) as prof:
            profiled_wall, _ = steps.run(args.profiled_steps)
    result = {
        **provenance("training/profile_train.py", argv, device),
        "batch": args.batch,
        "workers": args.workers,
        "train": args.train,
        "heads": [key for key, _ in steps.heads],
        **timing,
        "host_syncs": syncs,
        **summarise(device_events(prof, device), args.profiled_steps),
        "host": host_summary(prof, profiled_wall, args.profiled_steps),
    }
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
