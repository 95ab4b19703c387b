"""Where the time to first token goes: the phases of one question about one 1024x768 image
(the processor on the CPU, the vision tower, the prompt, the language model's prefill),
each timed on its own, and ``torch.profiler`` kernel categories of the prefill, on the
full-size Qwen2.5-VL-7B architecture (random weights, AWQ layout) through the engine's
own pipelines.

    python bench/profile_prefill.py --prefill-dequant-rows 256   # on the H200
    python bench/profile_prefill.py --device cpu --arch tiny --reps 2   # CPU dry run

A prefill with a cached image is the language-model phase alone (the embedding cache
skips the processor and the vision tower). ``--newcomers 1,8,16`` also times what
continuous batching does when that many questions (one image each) join at one step
boundary: the processor over all their images, the vision tower's one call
(``encode_many``), their prompts, and their joint padded prefill
(:class:`~qwen_ui.engine.batch_prefill.Prefill`), with that prefill's kernel categories.
Prints one JSON document on stdout.

    python bench/profile_prefill.py --prefill-dequant-rows 256 --newcomers 1,8,16   # H200
"""

from __future__ import annotations

import json
import logging
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from _checkpoints import DirStore, add_arch_options, arch_checkpoint
from _profiling import activities, device_events, profile_parser, summarise
from bench_decode import IMAGE_SIZE, copy_bandwidth, question
from PIL import Image
from profile_batching import silent_sequence
from torch.profiler import profile

from qwen_ui.engine.awq import Int4Linear
from qwen_ui.engine.batch_prefill import Prefill
from qwen_ui.engine.generate import CachePool, Generation, SamplingOptions
from qwen_ui.engine.pipelines import Loaded, ModelSpec, Pipelines, Turn
from qwen_ui.engine.status import EngineStatus

log = logging.getLogger("profile_prefill")


def load(path: Path, device: str, rows: int) -> Loaded:
    spec = ModelSpec("bench/qwen2.5-vl-random", "awq", device, 3136, 1_003_520, rows)
    return Pipelines(DirStore(path), spec, EngineStatus()).load()  # type: ignore[arg-type]


def noise_image(seed: int) -> Image.Image:
    small = Image.frombytes("RGB", (32, 32), random.Random(seed).randbytes(32 * 32 * 3))
    return small.resize(IMAGE_SIZE, Image.Resampling.BILINEAR)


def timed(fn: Callable[[], Any], device: torch.device) -> tuple[Any, float]:
    """``fn()`` and its wall milliseconds, the device synchronised before and after."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda *_: None)
    sync(device)
    t0 = time.perf_counter()
    value = fn()
    sync(device)
    return value, (time.perf_counter() - t0) * 1000


def phases(loaded: Loaded, text: str, seed: int, static: bool) -> dict[str, float]:
    """Milliseconds of each phase of one uncached question."""
    vision, language = loaded.vision, loaded.language
    device = language.model.device
    image = noise_image(seed)
    _, processor_ms = timed(
        lambda: vision.image_processor(images=[image], size=vision.size, return_tensors="pt"),
        device,
    )
    _, encode_ms = timed(lambda: vision.encode(image), device)
    embedding = vision.encode(image)
    prompt, prompt_ms = timed(lambda: language.build_prompt([Turn(text, 1)], [embedding]), device)
    generation = new_generation(loaded, prompt, static)
    _, prefill_ms = timed(generation.prefill, device)
    generation.release()
    return {
        "image_tokens": float(embedding.features.shape[0]),
        "processor_ms": processor_ms,
        "vision_ms": encode_ms - processor_ms,  # encode = processor + tower + copy to host
        "prompt_ms": prompt_ms,
        "prefill_ms": prefill_ms,
        "total_ms": encode_ms + prompt_ms + prefill_ms,
    }


def new_generation(loaded: Loaded, prompt: Any, static: bool) -> Generation:
    model = loaded.language.model
    if not static:
        return Generation(model, prompt, SamplingOptions(1))
    pool = getattr(loaded, "_bench_pool", None) or CachePool(model)
    loaded._bench_pool = pool  # type: ignore[attr-defined]
    return Generation(model, prompt, SamplingOptions(1), "static", pool)


def median_phases(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(sorted(r[k] for r in rows)[len(rows) // 2], 2) for k in rows[0]}


def profile_prefill(loaded: Loaded, text: str, static: bool, reps: int) -> dict[str, Any]:
    """Kernel categories of ``reps`` prefills of the same cached-image prompt."""
    device = loaded.language.model.device
    embedding = loaded.vision.encode(noise_image(0))
    prompt = loaded.language.build_prompt([Turn(text, 1)], [embedding])
    with profile(activities=activities(device)) as prof:
        for _ in range(reps):
            generation = new_generation(loaded, prompt, static)
            generation.prefill()
            generation.release()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    cpu_ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:12]
    summary = summarise(device_events(prof, device), reps)
    summary["top_cpu_ops"] = [
        {
            "name": e.key[:80],
            "self_cpu_ms_per_prefill": round(e.self_cpu_time_total / 1000 / reps, 2),
        }
        for e in cpu_ops
    ]
    return summary


def join_phases(loaded: Loaded, text: str, count: int, seed: int) -> dict[str, float]:
    """Milliseconds of each phase of ``count`` uncached one-image questions joining
    together, as :func:`qwen_ui.engine.answering.prepare` and the batch's prefill run
    them."""
    vision, language = loaded.vision, loaded.language
    device = language.model.device
    images = [noise_image(seed + i) for i in range(count)]
    _, processor_ms = timed(
        lambda: vision.image_processor(images=images, size=vision.size, return_tensors="pt"),
        device,
    )
    embeddings, encode_ms = timed(lambda: vision.encode_many(images), device)
    prompts, prompt_ms = timed(
        lambda: [language.build_prompt([Turn(text, 1)], [e]) for e in embeddings], device
    )
    _, prefill_ms = timed(lambda: joint_prefill(language.model, prompts), device)
    return {
        "prompt_tokens": float(max(p.length for p in prompts)),
        "processor_ms": processor_ms,
        "vision_ms": encode_ms - processor_ms,
        "prompt_ms": prompt_ms,
        "prefill_ms": prefill_ms,
        "total_ms": encode_ms + prompt_ms + prefill_ms,
    }


def joint_prefill(model: Any, prompts: list[Any]) -> Any:
    """The batch's padded pass over ``prompts`` and their last positions' logits."""
    with torch.inference_mode():
        prefill = Prefill(model, [silent_sequence(p, 1) for p in prompts])
        prefill.advance(0)
        return prefill.logits()


def profile_join(loaded: Loaded, text: str, count: int, reps: int) -> dict[str, Any]:
    """Kernel categories of ``reps`` joint prefills of ``count`` cached-image prompts."""
    device = loaded.language.model.device
    embeddings = loaded.vision.encode_many([noise_image(i) for i in range(count)])
    prompts = [loaded.language.build_prompt([Turn(text, 1)], [e]) for e in embeddings]
    with profile(activities=activities(device)) as prof:
        for _ in range(reps):
            joint_prefill(loaded.language.model, prompts)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return summarise(device_events(prof, device), reps)


def newcomers(loaded: Loaded, text: str, counts: list[int], reps: int) -> dict[str, Any]:
    """:func:`join_phases` (median of ``reps``, after a first join at this batch's shapes,
    reported apart) and :func:`profile_join` per count."""
    out: dict[str, Any] = {}
    for count in counts:
        first = join_phases(loaded, text, count, 1000)
        rows = [join_phases(loaded, text, count, 2000 + 100 * i) for i in range(reps)]
        out[str(count)] = {
            "first_phases_ms": first,
            "phases_ms": median_phases(rows),
            "prefill_profile": profile_join(loaded, text, count, max(1, reps // 2)),
        }
    return out


def dequantize_bytes(model: Any) -> int:
    """Bytes one prefill's dequantize moves: every int4 layer's packed weight and scales
    read, its weight written in the compute dtype (2 bytes)."""
    total = 0
    for m in model.modules():
        if isinstance(m, Int4Linear) and m.prefill_rows and not m.dequantized:
            read = m.packed.numel() * m.packed.element_size()
            read += m.scales_and_zeros.numel() * m.scales_and_zeros.element_size()
            total += read + 2 * m.in_features * m.out_features
    return total


def dequantize_rate(loaded: Loaded, summary: dict[str, Any]) -> dict[str, float] | None:
    """The dequantize's bytes per second against a device copy's, in the same run."""
    spent = summary["by_category"].get("dequantize", {}).get("us_per_step")
    moved = dequantize_bytes(loaded.language.model)
    device = loaded.language.model.device
    if not spent or not moved or device.type != "cuda":
        return None
    rate = moved / (spent / 1e6)
    copy = copy_bandwidth(device)
    return {
        "gb_per_prefill": round(moved / 1e9, 2),
        "gb_s": round(rate / 1e9, 1),
        "copy_gb_s": round(copy / 1e9, 1),
        "ratio_to_copy": round(rate / copy, 3),
    }


def main(argv: list[str] | None = None) -> int:
    p = profile_parser(__doc__)
    add_arch_options(p)
    p.add_argument("--prefill-dequant-rows", type=int, default=0)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--newcomers", default="", help="counts of one-image questions joining")
    args = p.parse_args(argv)
    name, path = arch_checkpoint(args.workdir, args.arch)
    loaded = load(path, args.device, args.prefill_dequant_rows)
    static = loaded.language.model.device.type == "cuda"  # the engine's decode mode there
    text, n_question = question(loaded.language.tokenizer)
    phases(loaded, text, 100, static)  # warm-up: kernels, compiled dequantize, allocator
    rows = [phases(loaded, text, 101 + i, static) for i in range(args.reps)]
    result = {
        "command": "python bench/profile_prefill.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "arch": name,
        "prefill_dequant_rows": args.prefill_dequant_rows,
        "decode_mode": "static" if static else "eager",
        "question_tokens": n_question,
        "phases_ms": median_phases(rows),
    }
    result["cached_image_prefill"] = profile_prefill(loaded, text, static, args.reps)
    result["dequantize_bandwidth"] = dequantize_rate(loaded, result["cached_image_prefill"])
    if args.newcomers:
        counts = [int(c) for c in args.newcomers.split(",")]
        result["newcomers"] = newcomers(loaded, text, counts, args.reps)
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
