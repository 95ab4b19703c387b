"""Demo training's data path: samples per second through ``train.Encoder`` against calling
the processor on the chat template (what the encoder replaced), in one process, one thread
(as one DataLoader worker runs).

    .venv/bin/python training/bench_encoder.py --samples 300

Both paths render the same scenes; the processor path also converts its normalised
``pixel_values`` back to bytes, as the old encoder did before shipping them to the GPU.
It also reports the pixel bytes per sample each path would ship (the encoder sends one of
the processor's two identical temporal frames).
Prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from qwen_ui.demo import scenes
from qwen_ui.engine.pipelines import Turn, messages
from training import train


def through_processor(encode: train.Encoder) -> Callable[[scenes.Sample], Any]:
    def run(item: scenes.Sample) -> Any:
        turns = [Turn(item.question, len(item.scenes))]
        text = encode.processor.apply_chat_template(
            messages(turns), add_generation_prompt=True, tokenize=False
        )
        out = encode.processor(text=[text], images=item.images(), return_tensors="pt")
        patches = out["pixel_values"].view(out["pixel_values"].shape[0], 3, -1)
        raw = (patches * encode.std + encode.mean) * 255
        return raw.round().clamp(0, 255).to(torch.uint8)

    return run


def per_second(fn: Callable[[scenes.Sample], Any], items: list[scenes.Sample]) -> float:
    for item in items[:10]:
        fn(item)
    t0 = time.perf_counter()
    for item in items:
        fn(item)
    return len(items) / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--samples", type=int, default=300)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    encode = train.Encoder(train.WEIGHTS)
    items = [scenes.sample(10**10 + i) for i in range(args.samples)]
    processor = per_second(through_processor(encode), items)
    encoder = per_second(encode, items)
    shipped = sum(encode(item)["pixel_u8"].numel() for item in items) / len(items)
    processor_bytes = sum(through_processor(encode)(item).numel() for item in items) / len(items)
    result = {
        "command": "python training/bench_encoder.py " + " ".join(sys.argv[1:]),
        "samples": args.samples,
        "processor_samples_per_s": round(processor, 1),
        "encoder_samples_per_s": round(encoder, 1),
        "ratio": round(encoder / processor, 2),
        # uint8 pixel bytes per sample the loader ships to the training process
        "encoder_pixel_bytes_per_sample": round(shipped),
        "processor_pixel_bytes_per_sample": round(processor_bytes),
    }
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
