"""How fast a demo-model training step can go (``training.train``), apart from its data:
the data workers' own rate, then steps a second on batches already on the device (cycled,
so no step waits for data), eager against ``--compile`` (``train.compile_parts``), for
each batch size, from the same fresh model with every training head on.

    python training/bench_train_step.py --batches 160,256      # on the GPU
    python training/bench_train_step.py --device cpu --batches 4 --workers 0 \
        --max-pixels 28224 --steps 2 --warmup 1 --data-skip 2 --data-batches 4   # CPU dry run
    python training/bench_train_step.py --device cpu --workers 1 --data-only   # one worker
    python training/bench_train_step.py ... --train-options "--follow-ups 3"   # a recipe's

The ratios (compiled / eager, both in this process) are the figures; a training run's
rate is the smaller of the step's and the workers'. Prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
import time
from itertools import cycle
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from bench._profiling import provenance
from training import train

log = logging.getLogger("bench_train_step")

HEADS = ["--relation-weight", "1", "--rank-weight", "2", "--name-weight", "1"]
HEADS += ["--name-layer", "3", "--pair-weight", "1", "--pair-layer", "4"]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--batches", default="160", help="comma-separated batch sizes")
    p.add_argument("--workers", type=int, default=14)
    p.add_argument("--max-pixels", type=int, default=None)
    p.add_argument("--data-batches", type=int, default=150, help="batches timed from workers")
    p.add_argument(
        "--data-skip",
        type=int,
        default=60,
        help="batches before timing them (each worker's first group and its prefetch)",
    )
    p.add_argument("--resident", type=int, default=6, help="batches kept on the device")
    p.add_argument("--warmup", type=int, default=8, help="steps before timing (compiles)")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument(
        "--data-only", action="store_true", help="the workers' rate alone (no model, no steps)"
    )
    p.add_argument(
        "--train-options",
        default="",
        help="more train.py options, as one string (e.g. '--follow-ups 3 --answer-weight 1')",
    )
    return p.parse_args(argv)


def training_args(args: argparse.Namespace, batch: int) -> argparse.Namespace:
    """train.py's options for a from-scratch run with every head."""
    argv = ["--out", "/tmp/bench-train-step", "--batch", str(batch), "--device", args.device]
    argv += ["--workers", str(args.workers), *HEADS, *shlex.split(args.train_options)]
    if args.max_pixels:
        argv += ["--max-pixels", str(args.max_pixels)]
    return train.parse_args(argv)


def data_rate(loader: Any, skip: int, n: int, batch: int) -> tuple[float, list[train.Batch]]:
    """Samples a second the workers deliver once ``skip`` batches are out (each worker
    makes a group of batches at a time, so the first ones come in a burst), and the
    first batches."""
    batches = iter(loader)
    kept = [next(batches) for _ in range(skip)]
    t0 = time.perf_counter()
    for _ in range(n):
        next(batches)
    return n * batch / (time.perf_counter() - t0), kept


class Step:
    """One fresh model with its heads and optimizer, stepped on resident batches."""

    def __init__(self, args: argparse.Namespace, device: torch.device, compiled: bool) -> None:
        torch.manual_seed(0)
        self.model = train.build_model(device)
        self.attention = train.BatchedAttention(self.model)
        self.attention.enable(True)
        width = self.model.config.text_config.hidden_size
        self.aux = train.AuxHead(width, 1.0, 1.0, 2.0).to(device)
        self.heads = train.language_heads(args, width, device, self.model)
        if compiled:
            train.compile_parts(self.model)
        self.opt = train.make_optimizer(self.model, 1e-4, 0.05, self.aux, 1.0, self.heads)
        self.model.train()
        self.device = device

    def run(self, batches: Any, n: int) -> tuple[float, list[float]]:
        """Seconds for ``n`` steps, and their answer losses."""
        t0 = time.perf_counter()
        losses = [self.one(next(batches)) for _ in range(n)]
        values = [float(v) for v in losses]
        return time.perf_counter() - t0, values

    def one(self, batch: train.Batch) -> torch.Tensor:
        return train.train_step(
            self.model, self.opt, batch, self.attention, self.aux, self.heads
        ).lm_loss


def measure(args: argparse.Namespace, device: torch.device, batch: int) -> dict[str, Any]:
    targs = training_args(args, batch)
    loader = train.scene_loader(targs, device)
    rate, kept = data_rate(loader, args.data_skip, args.data_batches, batch)
    resident = [train.to_device(b, device) for b in kept[: args.resident]]
    row: dict[str, Any] = {"batch": batch, "data_samples_per_s": round(rate, 1)}
    if args.data_only:
        return row
    first: dict[bool, list[float]] = {}
    for compiled in (False, True):
        step = Step(targs, device, compiled)
        warm_s, first[compiled] = step.run(cycle(resident), args.warmup)
        wall, _ = step.run(cycle(resident), args.steps)
        key = "compiled" if compiled else "eager"
        row[key] = {
            "warmup_s": round(warm_s, 1),
            "steps_per_s": round(args.steps / wall, 2),
            "samples_per_s": round(args.steps * batch / wall, 1),
        }
        del step
    row["speed_ratio"] = round(row["compiled"]["steps_per_s"] / row["eager"]["steps_per_s"], 2)
    row["first_losses"] = {"eager": first[False][:3], "compiled": first[True][:3]}
    row["max_loss_diff"] = max(abs(a - b) for a, b in zip(first[False], first[True], strict=True))
    return row


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = True  # as train.run sets it
    train.attention_kernels()
    rows = [measure(args, device, int(b)) for b in args.batches.split(",")]
    result = {
        **provenance("training/bench_train_step.py", argv, device),
        "torch": torch.__version__,
        "workers": args.workers,
        "rows": rows,
    }
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    sys.exit(main())
