"""The vision tower's batched attention on one training batch: the engine's
(``qwen_ui.engine.vision``: one SDPA call per group of equal-length windows, no padding)
against the stock per-window loop, in fp32 (largest difference of the tower's output and
of its weights' gradient), and the time of a bf16 forward and backward of the tower with
the stock loop and with the engine's attention.

    python training/check_vision_attention.py --device cuda --batch 160 --reps 10
    python training/check_vision_attention.py --device cpu --batch 4 --reps 1

Prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from qwen_ui.engine import vision
from training import train

log = logging.getLogger("check_vision_attention")


def tower_pass(model: Any, batch: train.Batch, amp: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The tower's output and the gradient of its parameters (flattened) for a fixed
    random projection of the output."""
    model.zero_grad(set_to_none=True)
    device_type = batch["pixel_values"].device.type
    with torch.autocast(device_type, dtype=torch.bfloat16, enabled=amp):
        feats = model.model.visual(
            batch["pixel_values"], grid_thw=batch["image_grid_thw"], **batch["vision"]
        ).pooler_output
    weights = torch.Generator(device="cpu").manual_seed(0)
    probe = torch.randn(feats.shape, generator=weights).to(feats.device)
    (feats.float() * probe).sum().backward()
    grads = [p.grad.flatten() for p in model.model.visual.parameters() if p.grad is not None]
    return feats.detach().float(), torch.cat(grads)


def timed(step: Callable[[], object], reps: int, device: torch.device) -> float:
    """Mean seconds of ``step`` over ``reps`` runs, after one untimed run."""
    step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps


def check(device: torch.device, batch_size: int, reps: int) -> dict[str, Any]:
    model = train.build_model(device, train.WEIGHTS)
    data = train.SceneBatches(train.WEIGHTS, batch_size, seed=99)
    encode = train.Encoder(train.WEIGHTS)
    rows = [encode(data.nth(i)) for i in range(batch_size)]
    batch = train.to_device(train.collate(rows), device)
    stock_out, stock_grad = tower_pass(model, batch, amp=False)
    vision.install(model)
    fast_out, fast_grad = tower_pass(model, batch, amp=False)
    engine_s = timed(lambda: tower_pass(model, batch, amp=True), reps, device)
    vision.uninstall(model)
    stock_s = timed(lambda: tower_pass(model, batch, amp=True), max(1, reps // 3), device)
    return {
        "device": str(device),
        "batch": batch_size,
        "images": len(batch["image_grid_thw"]),
        "max_abs_diff_out": float((stock_out - fast_out).abs().max()),
        "out_scale": float(stock_out.abs().max()),
        "max_abs_diff_grad": float((stock_grad - fast_grad).abs().max()),
        "grad_scale": float(stock_grad.abs().max()),
        "tower_fwd_bwd_s": {
            "engine": round(engine_s, 4),
            "stock_loop": round(stock_s, 4),
        },
    }


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=160)
    p.add_argument("--reps", type=int, default=10)
    args = p.parse_args(argv)
    result = check(torch.device(args.device), args.batch, args.reps)
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
