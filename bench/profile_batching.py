"""What one decode step of continuous batching costs per batch-size bucket, beside the
one-request path's step, on the Qwen2.5-VL-7B architecture (random weights, AWQ layout).

    python bench/profile_batching.py                     # on the H200
    python bench/profile_batching.py --device cpu --arch tiny --rows 1,2 --steps 4 \\
        --compiled-rows ''                               # CPU dry run

Every sequence has the same ``--prompt``-token text prompt (prefilled once, its keys and
values copied into every slot of a :class:`~qwen_ui.engine.slots.SlotCache` sized for
``--new-tokens`` more), so the step attends over the slot length a request of that size
gets. Per bucket of ``--rows`` and per variant, milliseconds per step: ``queued`` (steps
launched back to back, the device's pace) and ``synced`` (each step's tokens read by the
host before the next launch, as :class:`~qwen_ui.engine.batching.Batch` does). Variants:
``graph`` (the engine's :class:`~qwen_ui.engine.decode_graphs.DecodeGraphs`: the eager
step recorded as a CUDA graph, int4 kernel), ``graph-repeat-kv`` (the same with
transformers' attention, which repeats the cache per query head under a mask),
``graph-dequant`` (each int4 layer on a weight dequantized per call, rows >= 2),
``graph-dense`` (each int4 layer on a kept bf16 copy of its weight, rows >= 2: what
``dense_weight_share`` keeps, forced from 2 rows instead of the load's timed crossover),
``graph-compiled`` (the step through
``torch.compile``, Inductor, recorded the same way; only ``--compiled-rows``, with its
compile time), ``graph-compiled-bmm`` (the same with the attention scores as one
float32-accumulated batched matmul instead of a product and sum),
``graph-compiled-triton`` (the compiled step with the engine's Triton int4 copies,
``QWEN_UI_TRITON_INT4``: few-row inputs through ``qwen_ui.engine.triton_int4`` from each
shape's timed crossover), ``graph-compiled-attn`` (the compiled step with the engine's
Triton attention, ``qwen_ui.engine.decode_attention``; the other compiled variants keep
the attention on Inductor, :func:`fused.decode_attention`) and, for comparison,
``one-request``: the single-request loop's compiled static step
(``generate.compiled_step``). ``max_abs_logit_diff`` compares a variant's
logits with ``graph``'s for the same step. ``--kernels 1,8,16`` adds where each of those
steps' device time goes (``torch.profiler`` kernel categories of ``--steps`` unrecorded
steps: the recorded step runs the same kernels), with the int4 kernel and, on CUDA, with
the dense copies (``kernels`` and ``kernels-dense``); ``--kernels-compiled 1`` the same for
the step through Inductor (``kernels-compiled``: the kernels the engine's recorded step
replays, launched one by one here, so their summed time is the device's share of a
replayed step). Prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from _checkpoints import DirStore, add_arch_options, arch_checkpoint
from _profiling import activities, device_events, profile_parser, summarise
from torch.profiler import profile

from qwen_ui.engine import fused, triton_int4
from qwen_ui.engine.awq import Int4Linear
from qwen_ui.engine.batch_prefill import Prefill
from qwen_ui.engine.batching import Sequence
from qwen_ui.engine.decode_graphs import DecodeGraphs
from qwen_ui.engine.dense_weights import dense_weight
from qwen_ui.engine.generate import (
    CachePool,
    Generation,
    Prompt,
    SamplingOptions,
    compiled_step,
)
from qwen_ui.engine.pipelines import Loaded, ModelSpec, Pipelines, Turn
from qwen_ui.engine.slots import SlotCache
from qwen_ui.engine.status import EngineStatus

log = logging.getLogger("profile_batching")
DEQUANT_ROWS = 256  # the default prefill_dequant_rows: keeps what dequantizing reads
COMPILED = ("graph-compiled", "graph-compiled-bmm", "graph-compiled-triton", "graph-compiled-attn")


def load(path: Path, device: str) -> Loaded:
    spec = ModelSpec(
        "bench/qwen2.5-vl-random", "awq", device, 3136, 1_003_520, DEQUANT_ROWS, "batched", True
    )
    return Pipelines(DirStore(path), spec, EngineStatus()).load()  # type: ignore[arg-type]


def text_prompt(loaded: Loaded, tokens: int) -> Prompt:
    ids = loaded.language.tokenizer(" shape" * tokens)["input_ids"][:tokens]
    return loaded.language.build_prompt([Turn(loaded.language.decode(ids), 0)], [])


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], steps: int, device: torch.device) -> float:
    """Milliseconds per call of ``fn`` over ``steps`` calls, the device drained after."""
    sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    sync(device)
    return (time.perf_counter() - t0) * 1000 / steps


def one_request(loaded: Loaded, prompt: Prompt, args: argparse.Namespace) -> dict[str, Any]:
    """The single-request loop's step: static cache, compiled on CUDA."""
    model = loaded.language.model
    device = model.device
    options = SamplingOptions(args.new_tokens)
    if device.type != "cuda":
        generation = Generation(model, prompt, options)
    else:
        generation = Generation(
            model, prompt, options, "static", CachePool(model), compiled_step(model)
        )
    t0 = time.perf_counter()
    token = generation.prefill()
    for _ in range(args.warmup):
        token = generation.step(token)
    warm_s = time.perf_counter() - t0
    pending = generation.advance(token)

    def chained() -> None:
        nonlocal pending
        pending = generation.advance(pending)

    queued = timed(chained, args.steps, device)
    token = pending.read()
    synced = timed(lambda: generation.step(token), args.steps, device)
    generation.release()
    return {
        "queued_ms": round(queued, 3),
        "synced_ms": round(synced, 3),
        "warm_s": round(warm_s, 1),
    }


def filled_cache(
    loaded: Loaded, prompt: Prompt, rows: int, new_tokens: int
) -> tuple[SlotCache, Sequence]:
    """A slot cache of ``rows`` slots, each holding the prompt's keys and values."""
    seq = silent_sequence(prompt, new_tokens)
    prefill = Prefill(loaded.language.model, [seq])
    prefill.advance(0)
    cache = SlotCache(rows)
    cache.ensure(rows, seq.needed, prefill.kv)
    for slot in range(rows):
        cache.write(slot, prefill.kv, 0, prompt.length)
    seq.length = prompt.length
    seq.last = int(prefill.logits().argmax(-1)[0])
    return cache, seq


def silent_sequence(prompt: Prompt, new_tokens: int) -> Sequence:
    """A batch sequence for ``prompt`` whose callbacks do nothing and which is never
    cancelled (the benches drive its steps themselves)."""
    return Sequence(
        prompt, SamplingOptions(new_tokens), frozenset(), _ignore, _ignore, _ignore, _never
    )


def _ignore(_event: object) -> None:
    return None


def _never() -> bool:
    return False


@contextmanager
def repeated_kv(on: bool) -> Iterator[None]:
    """The fused attention's eager steps through transformers' SDPA path (repeat_kv)."""
    packs = fused.packs
    if on:
        fused.packs = lambda *_args: False  # type: ignore[assignment]
    try:
        yield
    finally:
        fused.packs = packs


def matmul_scores_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float
) -> torch.Tensor:
    """:func:`fused.decode_attention` with the scores as one batched matmul of the bf16
    query rows and keys, accumulated and returned in float32 (``bmm``'s ``out_dtype``, CUDA
    only), in place of Inductor's product-and-sum over the dimension."""
    batch, heads, _, dim = q.shape
    groups, length = k.shape[1], k.shape[2]
    rows = q.reshape(batch * groups, heads // groups, dim)
    keys = k.reshape(batch * groups, length, dim).transpose(1, 2)
    scores = torch.bmm(rows, keys, out_dtype=torch.float32) * scale
    return fused.attend(scores.view(batch, groups, heads // groups, length), v, mask)


@contextmanager
def matmul_scores(on: bool) -> Iterator[None]:
    """The compiled step's attention scores through :func:`matmul_scores_attention`."""
    stock = fused.decode_attention
    if on:
        fused.decode_attention = matmul_scores_attention
    try:
        yield
    finally:
        fused.decode_attention = stock


def inductor_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float
) -> torch.Tensor:
    """:func:`fused.decode_attention` as it stands when called (``matmul_scores`` swaps it)."""
    return fused.decode_attention(q, k, v, mask, scale)


@contextmanager
def kernel_attention(on: bool) -> Iterator[None]:
    """The compiled step's attention through the Triton kernels (``fused.step_attention``,
    the engine's) when on, else through Inductor (:func:`inductor_attention`)."""
    stock = fused.step_attention
    if not on:
        fused.step_attention = inductor_attention
    try:
        yield
    finally:
        fused.step_attention = stock


@contextmanager
def dequantized(model: torch.nn.Module, on: bool) -> Iterator[None]:
    """Every int4 layer on a weight dequantized per call for inputs of 2 rows or more."""
    layers = [m for m in model.modules() if isinstance(m, Int4Linear) and m.prefill_rows]
    for layer in layers:
        layer.prefill_rows = 1 if on else DEQUANT_ROWS
    try:
        yield
    finally:
        for layer in layers:
            layer.prefill_rows = DEQUANT_ROWS


@contextmanager
def dense_copies(model: torch.nn.Module, on: bool) -> Iterator[None]:
    """Every int4 layer on a kept bf16 copy of its weight for inputs of 2 rows or more."""
    layers = [m for m in model.modules() if isinstance(m, Int4Linear)] if on else []
    for layer in layers:
        weight = dense_weight(layer)
        assert weight is not None, "the kernel's layout was not recognised"
        layer.keep_dense(weight, 2)
    try:
        yield
    finally:
        for layer in layers:
            layer.drop_dense()


@contextmanager
def triton_copies(model: torch.nn.Module, on: bool) -> Iterator[None]:
    """The engine's Triton int4 copies (``triton_int4.keep_copies``: checked and timed per
    layer shape) kept for the variant, dropped after it."""
    if on:
        triton_int4.keep_copies(model)
    try:
        yield
    finally:
        for layer in model.modules():
            if isinstance(layer, Int4Linear):
                layer.drop_rows_kernel()


def bucket_times(
    graphs: DecodeGraphs, seq: Sequence, rows: int, args: argparse.Namespace
) -> tuple[dict[str, Any], torch.Tensor]:
    """One bucket's step: recorded on the first call, then timed queued and synced."""
    device = graphs.cache.keys[0].device
    ids, pos, rope = [seq.last] * rows, [seq.length] * rows, [seq.length + seq.rope_delta] * rows
    t0 = time.perf_counter()
    first = graphs.logits(ids, pos, rope)
    sync(device)
    record_s = time.perf_counter() - t0
    reference = first.float().clone()
    for _ in range(args.warmup):
        graphs.logits(ids, pos, rope)
    queued = timed(lambda: graphs.logits(ids, pos, rope), args.steps, device)
    synced = timed(lambda: graphs.logits(ids, pos, rope).argmax(-1).tolist(), args.steps, device)
    figures = {
        "queued_ms": round(queued, 3),
        "synced_ms": round(synced, 3),
        "tok_s_queued": round(rows * 1000 / queued, 1),
        "record_s": round(record_s, 2),
    }
    return figures, reference


def variant(
    name: str,
    loaded: Loaded,
    prompt: Prompt,
    rows: list[int],
    args: argparse.Namespace,
    baseline: dict[int, torch.Tensor],
) -> dict[str, Any]:
    """Every bucket of ``rows`` through one variant (its own cache and graphs)."""
    model = loaded.language.model
    cache, seq = filled_cache(loaded, prompt, max(rows), args.new_tokens)
    compiling = name in COMPILED
    torch._dynamo.reset()  # each variant its own compile: dynamo would reuse the last one's
    forward = torch.compile(model.forward, dynamic=False) if compiling else None
    graphs = DecodeGraphs(model, cache, forward=forward)
    out: dict[str, Any] = {"slot_length": cache.length, "buckets": {}}
    with (
        dequantized(model, name == "graph-dequant"),
        repeated_kv(name == "graph-repeat-kv"),
        dense_copies(model, name == "graph-dense"),
        matmul_scores(name == "graph-compiled-bmm"),
        kernel_attention(name == "graph-compiled-attn"),
        triton_copies(model, name == "graph-compiled-triton"),
    ):
        for r in rows:
            if name in ("graph-dequant", "graph-dense") and r < 2:
                continue
            try:
                figures, logits = bucket_times(graphs, seq, r, args)
            except Exception as exc:  # a variant that fails is reported, the others run
                log.exception("%s at %d rows failed", name, r)
                out["buckets"][str(r)] = {"error": repr(exc)[:400]}
                continue
            if name == "graph":
                baseline[r] = logits
            elif r in baseline:
                figures["max_abs_logit_diff"] = round(float((logits - baseline[r]).abs().max()), 4)
            out["buckets"][str(r)] = figures
            log.info("%s rows=%d %s", name, r, figures)
    out["recorded"] = graphs.record
    return out


def step_kernels(
    loaded: Loaded,
    prompt: Prompt,
    rows: list[int],
    args: argparse.Namespace,
    dense: bool,
    compiled: bool = False,
) -> dict[str, Any]:
    """Kernel categories of ``args.steps`` unrecorded batch steps per count of ``rows``
    (with ``compiled``, of the step through Inductor, whose kernels the engine records)."""
    model = loaded.language.model
    device = model.device
    cache, seq = filled_cache(loaded, prompt, max(rows), args.new_tokens)
    forward = torch.compile(model.forward, dynamic=False) if compiled else None
    graphs = DecodeGraphs(model, cache, record=False, forward=forward)
    out: dict[str, Any] = {}
    with dense_copies(model, dense):
        for r in rows:
            ids, pos = [seq.last] * r, [seq.length] * r
            rope = [seq.length + seq.rope_delta] * r
            for _ in range(2):  # warm-up: autotuning, allocations
                graphs.logits(ids, pos, rope)
            sync(device)
            with profile(activities=activities(device)) as prof:
                for _ in range(args.steps):
                    graphs.logits(ids, pos, rope)
                sync(device)
            out[str(r)] = summarise(device_events(prof, device), args.steps)
    return out


def main(argv: list[str] | None = None) -> int:
    p = profile_parser(__doc__)
    add_arch_options(p)
    p.add_argument("--rows", default="1,2,4,8,16")
    p.add_argument("--compiled-rows", default="1,8")
    p.add_argument("--prompt", type=int, default=1024, help="prompt tokens per sequence")
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--warmup", type=int, default=8)
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--no-dequant", action="store_true", help="skip graph-dequant")
    p.add_argument("--kernels", default="", help="rows whose step's kernels are profiled")
    p.add_argument(
        "--kernels-compiled", default="", help="rows whose compiled step's kernels are profiled"
    )
    p.add_argument(
        "--variants",
        default="",
        help="comma-separated variants to run, 'graph' first, and 'one-request' "
        "(default: all that apply)",
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    rows = [int(r) for r in args.rows.split(",") if r]
    compiled = [int(r) for r in args.compiled_rows.split(",") if r]
    name, path = arch_checkpoint(args.workdir, args.arch)
    loaded = load(path, args.device)
    prompt = text_prompt(loaded, args.prompt)
    device = loaded.language.model.device
    result: dict[str, Any] = {
        "command": "python bench/profile_batching.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "arch": name,
        "prompt_tokens": prompt.length,
    }
    with torch.inference_mode():
        baseline: dict[int, torch.Tensor] = {}
        plan = [("graph", rows), ("graph-repeat-kv", rows)]
        if not args.no_dequant:
            plan.append(("graph-dequant", rows))
        if device.type == "cuda":
            plan.append(("graph-dense", rows))
        if compiled and device.type == "cuda":
            plan.append(("graph-compiled", compiled))
            plan.append(("graph-compiled-bmm", compiled))
            plan.append(("graph-compiled-triton", compiled))
            plan.append(("graph-compiled-attn", compiled))
        if args.variants:
            plan = [v for v in plan if v[0] in args.variants.split(",")]
        for variant_name, variant_rows in plan:
            t0 = time.perf_counter()
            result[variant_name] = variant(
                variant_name, loaded, prompt, variant_rows, args, baseline
            )
            result[variant_name]["seconds"] = round(time.perf_counter() - t0, 1)
            sys.stderr.write(json.dumps({variant_name: result[variant_name]}) + "\n")
        kernel_rows = [int(r) for r in args.kernels.split(",") if r]
        if kernel_rows:
            result["kernels"] = step_kernels(loaded, prompt, kernel_rows, args, False)
        if kernel_rows and device.type == "cuda":
            result["kernels-dense"] = step_kernels(loaded, prompt, kernel_rows, args, True)
        compiled_kernel_rows = [int(r) for r in args.kernels_compiled.split(",") if r]
        if compiled_kernel_rows:
            result["kernels-compiled"] = step_kernels(
                loaded, prompt, compiled_kernel_rows, args, False, compiled=True
            )
    if not args.variants or "one-request" in args.variants.split(","):
        result["one-request"] = one_request(loaded, prompt, args)
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
