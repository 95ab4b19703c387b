"""The prompt's host time: ``LanguagePipeline.build_prompt`` (one placeholder per image
tokenized, then widened among the ids) against tokenizing the text with every image pad
written out (what it did before the fifth session), in one process, on the demo model's
tokenizer, for a question about images of 999 visual tokens each (one 1024x768 image of
the 7B benches).

    .venv/bin/python bench/bench_prompt.py --reps 50

Prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from qwen_ui.demo.install import weights_dir
from qwen_ui.engine.cache import Embedding
from qwen_ui.engine.pipelines import LanguagePipeline, ModelSpec, Pipelines, Turn, messages
from qwen_ui.engine.status import EngineStatus
from qwen_ui.settings import DEMO_MODEL_ID
from qwen_ui.store import ModelStore

IMAGE_TOKENS = 999
PAD = "<|image_pad|>"


def written_out(language: LanguagePipeline, turns: list[Turn], counts: list[int]) -> Any:
    """The earlier way: every image pad in the text, then one tokenizer call."""
    text = str(
        language.processor.apply_chat_template(
            messages(turns), tokenize=False, add_generation_prompt=True
        )
    )
    parts = text.split(PAD)
    pieces = [parts[0]]
    for count, rest in zip(counts, parts[1:], strict=True):
        pieces += [PAD * count, rest]
    return language.tokenizer("".join(pieces), return_tensors="pt")["input_ids"]


def median_ms(fn: Callable[[], Any], reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def compare(language: LanguagePipeline, images: int, reps: int) -> dict[str, Any]:
    grid = (1, 54, 74)  # 27 x 37 merged tokens = 999
    embeddings = [Embedding(torch.zeros(IMAGE_TOKENS, 8), grid) for _ in range(images)]
    turns = [Turn("How many red circles are there in the pictures?", images)]
    counts = [IMAGE_TOKENS] * images
    ours = language.build_prompt(turns, embeddings).input_ids
    assert torch.equal(ours, written_out(language, turns, counts))  # the same ids both ways
    now = median_ms(lambda: language.build_prompt(turns, embeddings), reps)
    old = median_ms(lambda: written_out(language, turns, counts), reps)
    return {
        "prompt_tokens": int(ours.shape[1]),
        "build_prompt_ms": round(now, 3),
        "pads_written_out_ms": round(old, 3),
        "ratio": round(old / now, 2),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--reps", type=int, default=50)
    args = p.parse_args(argv)
    store = ModelStore(Path(tempfile.mkdtemp()))
    store.install(weights_dir("bf16"), DEMO_MODEL_ID, "bf16")
    spec = ModelSpec(DEMO_MODEL_ID, "bf16", "cpu", 3136, 112_896)
    language = Pipelines(store, spec, EngineStatus()).load().language
    rows = {f"{n}_images": compare(language, n, args.reps) for n in (1, 3)}
    result = {"command": "python bench/bench_prompt.py " + " ".join(sys.argv[1:]), **rows}
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
