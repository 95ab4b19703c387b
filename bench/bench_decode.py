"""Decode and time-to-first-token benchmark (issue 8): the engine against stock transformers
``generate`` and the memory-bandwidth bound, in one process, on a random checkpoint in the
official Qwen2.5-VL AWQ layout (int4, group 128, vision tower in floating point), or the
same layout of Qwen3-VL's dense architectures (``--arch qwen3-8b``, ``qwen3-4b``).

    python bench/bench_decode.py --arch 7b > $OUT/decode.json          # on the H200
    python bench/bench_decode.py --arch 7b,qwen3-8b                      # both, one run
    python bench/bench_decode.py --arch 7b --a10                         # weights+budget <= 22 GiB
    python bench/bench_decode.py --arch 7b --web --skip-stock            # HTTP client vs engine
    python bench/bench_decode.py --arch tiny --device cpu                # CPU dry run

With several architectures (comma-separated) each is measured in turn, engine then stock,
and ``comparison`` sets them side by side: decode tokens/s, weight bytes read per second
(tokens/s x bytes read per token: the per-byte figure that compares models of different
sizes), its ratio to the first architecture's, and the engine's speed-up over stock.

What is measured (all in this process, one after the other):

* **bandwidth**: a device-to-device copy of a large buffer; bytes read + written per second.
* **engine**: ``Engine.ask`` (the product's own path: admission-free engine, worker thread,
  events), with ``--decode-mode`` (default ``static`` on CUDA) and ``--compile`` (CUDA
  graphs for the decode step). Time to first token = from calling ``ask`` to the first
  ``Token`` event, for one 1024x768 image + a 32-token question, three such images, and the
  first image again (its embedding cached: ``Done.cache_hits`` says so). Decode tokens/s =
  (tokens - 1) / (last token time - first token time) over ``--new-tokens`` (default 256) for
  a text-only question; random weights may emit a stop token early: the count is reported.
* **stock**: transformers ``generate`` on the same weights dequantized to bf16 (dynamic
  cache, greedy, ``min_new_tokens`` = ``max_new_tokens``), with the processor in the timed
  path as the engine has its own preprocessing in it. Skip with ``--skip-stock``.
* **bound**: bytes read per decoded token (decoder weights as stored: int4 layers, norms and
  the LM head; one embedding row; not the vision tower) / the measured bandwidth.
* **web** (``--web``): the app without its UI (``create_app(ui=False)``) under uvicorn on
  loopback, a bearer API token added through the auth layer; a stdlib HTTP client streams
  ``POST /api/v1/ask`` and times the NDJSON token events; beside it the engine-internal
  figure of the same request (``Done.timings``) and of ``Engine.ask`` above.

Memory: CUDA: ``memory_allocated`` after loading (weights) and ``max_memory_allocated``
(peak) per phase; CPU: the tensors' bytes (weights) and the process's max RSS (peak).
Prints one JSON document on stdout; logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import http.client
import io
import json
import logging
import random
import resource
import socket
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from _checkpoints import (
    A10_LIMIT,
    ARCH,
    DirStore,
    arch_checkpoint,
    limit_device_memory,
)
from PIL import Image
from transformers import AutoProcessor

from qwen_ui.engine.awq_format import QUANT_SUFFIXES, dequantize
from qwen_ui.engine.engine import AskOptions, AskRequest, Engine
from qwen_ui.engine.events import Done, Token
from qwen_ui.engine.loading import _read_tensors, rename
from qwen_ui.settings import Settings
from qwen_ui.state import MemoryState

log = logging.getLogger("bench_decode")
GiB = 1024**3
MODEL_ID = "bench/random-vl"
IMAGE_SIZE = (1024, 768)
QUESTION = (
    "Please look carefully at this picture and tell me what objects you can see, "
    "where they are placed, which colours dominate the scene and whether anything in it "
    "looks unusual or out of place to you today"
)


# --- bandwidth and bound ---------------------------------------------------------------


def copy_bandwidth(device: torch.device) -> float:
    """Bytes per second of a large device copy (read + write)."""
    size = GiB if device.type == "cuda" else 256 * 2**20
    src = torch.empty(size, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    _sync(device)
    reps = 20 if device.type == "cuda" else 5
    t0 = time.perf_counter()
    for _ in range(reps):
        dst.copy_(src)
    _sync(device)
    seconds = time.perf_counter() - t0
    del src, dst
    return 2 * size * reps / seconds


ROW_COPIES = ("rows_words", "dense")  # Int4Linear's copies for a batch's rows


def decode_bytes(model: Any) -> int:
    """Bytes one decode step of one row reads: the decoder's tensors as stored (not the
    vision tower, not the AWQ copies kept for the dequantized prefill, not the copies
    for a batch's rows: the Triton kernel's words and dense weights), with one row of the
    embedding table instead of the whole table (unless it is also the LM head)."""
    total = 0
    embed = model.get_input_embeddings().weight
    seen: set[int] = set()
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        leaf = name.rpartition(".")[2]
        not_read = leaf.startswith("awq_") or leaf in ROW_COPIES  # by a one-row step
        if ".visual." in f".{name}" or id(tensor) in seen or not_read:
            continue
        seen.add(id(tensor))
        if tensor is embed:
            tied = model.get_output_embeddings().weight is embed
            total += tensor.nbytes if tied else tensor[0].nbytes
            continue
        total += tensor.nbytes
    return total


# --- requests --------------------------------------------------------------------------


def question(tokenizer: Any, tokens: int = 32) -> tuple[str, int]:
    """A question of ``tokens`` tokens (as near as whole words allow) and its count."""
    words: list[str] = []
    for word in QUESTION.split() * 4:
        if len(tokenizer(" ".join([*words, word]))["input_ids"]) > tokens:
            break
        words.append(word)
    text = " ".join(words)
    return text, len(tokenizer(text)["input_ids"])


def image_bytes(rng: random.Random, size: tuple[int, int] = IMAGE_SIZE) -> bytes:
    """A noise JPEG: random content, so no two share an embedding-cache entry."""
    small = Image.frombytes("RGB", (32, 32), rng.randbytes(32 * 32 * 3))
    buf = io.BytesIO()
    small.resize(size, Image.Resampling.BILINEAR).save(buf, "JPEG", quality=85)
    return buf.getvalue()


async def timed_ask(engine: Engine, request: AskRequest) -> dict[str, Any]:
    t0 = time.perf_counter()
    stamps: list[float] = []
    done: Done | None = None
    async for event in engine.ask(request):
        if isinstance(event, Token):
            stamps.append(time.perf_counter())
        elif isinstance(event, Done):
            done = event
        elif getattr(event, "type", "") == "failed":
            raise RuntimeError(f"request failed: {event}")
    if done is None or not stamps:
        raise RuntimeError("request ended without tokens")
    return _figures(t0, stamps, done.completion_tokens, done.timings, done.cache_hits)


def _figures(
    t0: float, stamps: list[float], tokens: int, timings: dict[str, float], hits: int
) -> dict[str, Any]:
    span = stamps[-1] - stamps[0]
    return {
        "ttft_ms": round((stamps[0] - t0) * 1000, 1),
        "tokens": tokens,
        "events": len(stamps),
        "tok_s": round((tokens - 1) / span, 1) if tokens > 1 and span > 0 else None,
        "cache_hits": hits,
        "engine_timings": timings,
    }


# --- the engine ------------------------------------------------------------------------


def engine_settings(args: argparse.Namespace, **extra: Any) -> Settings:
    values: dict[str, Any] = {
        "home": args.workdir / "home",
        "model_id": MODEL_ID,
        "model_revision": "awq",
        "device": args.device,
        "decode_mode": args.decode_mode,
        "compile_decode": args.compile,
        "prefill_dequant_rows": args.prefill_dequant_rows,
        "prefill_graph_rows": args.prefill_graph_rows,
        "fuse_projections": args.fuse,
        "max_images": 8,
        "max_image_pixels": 50_000_000,
        "embed_cache_bytes": 512 * 2**20,
        "max_new_tokens": 64,
        "max_new_tokens_limit": 4096,
        "queue_timeout_s": 600,
        "downscale_to_fit": False,
    }
    if args.a10:
        values["vram_budget"] = float(A10_LIMIT)
    values.update(extra)
    return Settings(**values)


async def engine_phase(args: argparse.Namespace, path: Path) -> dict[str, Any]:
    device = torch.device(args.device)
    engine = Engine(engine_settings(args), DirStore(path), MemoryState())
    engine.start()
    rng = random.Random(3)
    tokenizer = AutoProcessor.from_pretrained(path, local_files_only=True).tokenizer
    text, n_question = question(tokenizer)
    result: dict[str, Any] = {"question_tokens": n_question}
    try:
        _reset_peak(device)
        t0 = time.perf_counter()
        await timed_ask(engine, _ask(text, [image_bytes(rng)], 8))  # loads and warms
        result["first_request_s"] = round(time.perf_counter() - t0, 2)
        model = engine.pipelines.language().model
        result["weights_gib"] = round(_weights(device, model) / GiB, 3)
        result["decode_bytes_per_token"] = decode_bytes(model)
        for _ in range(args.warmup):  # compile/graph capture for the decode buckets used
            await timed_ask(engine, _ask(text, [], args.new_tokens))
        one = [await timed_ask(engine, _ask(text, [image_bytes(rng)], 1)) for _ in range(args.reps)]
        cached_image = image_bytes(rng)
        await timed_ask(engine, _ask(text, [cached_image], 1))
        cached = [await timed_ask(engine, _ask(text, [cached_image], 1)) for _ in range(args.reps)]
        three = [
            await timed_ask(engine, _ask(text, [image_bytes(rng) for _ in range(3)], 1))
            for _ in range(args.reps)
        ]
        decode = await timed_ask(engine, _ask(text, [], args.new_tokens))
        result.update(
            ttft_ms_1_image=_median(one, "ttft_ms"),
            ttft_ms_3_images=_median(three, "ttft_ms"),
            ttft_ms_cached_image=_median(cached, "ttft_ms"),
            cached_hits=[c["cache_hits"] for c in cached],
            decode=decode,
            decode_tok_s=decode["tok_s"],
            peak_gib=round(_peak(device) / GiB, 3),
            prefill_graph_buckets=_graph_buckets(engine),
        )
    finally:
        await engine.close()
    return result


def _graph_buckets(engine: Engine) -> list[int]:
    """The prompt-length buckets whose prefill was recorded as a CUDA graph."""
    decoder = engine._decoder
    return decoder.graphs.buckets if decoder is not None and decoder.graphs is not None else []


def _ask(text: str, images: list[bytes], max_new: int) -> AskRequest:
    return AskRequest(
        tenant="bench",
        question=text,
        images=images,
        options=AskOptions(max_new_tokens=max_new),
    )


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r[key] is not None]
    return round(statistics.median(values), 1) if values else None


# --- stock transformers ----------------------------------------------------------------


def stock_model(path: Path, device: torch.device, dtype: torch.dtype) -> Any:
    """``AutoModelForImageTextToText`` in ``dtype`` with the AWQ layers dequantized."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    config = AutoConfig.from_pretrained(path, local_files_only=True)
    raw = json.loads((path / "config.json").read_text())
    group = int(raw["quantization_config"]["group_size"])
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        model: Any = AutoModelForImageTextToText.from_config(config, dtype=dtype)
    model.to_empty(device=device)
    state = dict(model.named_parameters()) | dict(model.named_buffers())
    names = set(state)
    tensors = dict(_read_tensors(path))
    with torch.no_grad():
        for key in list(tensors):
            prefix, _, leaf = key.rpartition(".")
            if leaf in QUANT_SUFFIXES:
                if leaf != "qweight":
                    continue
                q, z, s = (tensors.pop(f"{prefix}.{x}").to(device) for x in QUANT_SUFFIXES)
                target = rename(f"{prefix}.weight", names)
                if target is None:
                    raise KeyError(key)
                state[target].copy_(dequantize(q, z, s, group).to(dtype))
                continue
            target = rename(key, names)
            if target is not None and target in state:
                state[target].copy_(tensors[key].to(device=device, dtype=state[target].dtype))
    del tensors
    for module in model.modules():  # to_empty left the non-persistent rotary tables empty
        if "RotaryEmbedding" in type(module).__name__:
            model._init_weights(module)
    if getattr(config, "tie_word_embeddings", False):
        model.lm_head.weight = model.get_input_embeddings().weight
    model.eval()
    return model


class _Stamps:
    """A ``generate`` streamer recording when each new token arrives."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def stock_phase(args: argparse.Namespace, path: Path) -> dict[str, Any]:
    device = torch.device(args.device)
    dtype = torch.bfloat16
    _reset_peak(device)
    base = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    model = stock_model(path, device, dtype)
    processor = AutoProcessor.from_pretrained(path, local_files_only=True)
    weights = (
        torch.cuda.memory_allocated(device) - base
        if device.type == "cuda"
        else sum(t.nbytes for t in model.state_dict().values())
    )
    text, _ = question(processor.tokenizer)
    rng = random.Random(4)

    def run(n_images: int, new: int) -> dict[str, Any]:
        images = [Image.open(io.BytesIO(image_bytes(rng))) for _ in range(n_images)]
        content: list[dict[str, Any]] = [{"type": "image"} for _ in images]
        content.append({"type": "text", "text": text})
        messages = [{"role": "user", "content": content}]
        t0 = time.perf_counter()
        prompt = processor.apply_chat_template(messages, add_generation_prompt=True)
        inputs = processor(text=[prompt], images=images or None, return_tensors="pt").to(device)
        stamps = _Stamps()
        with torch.inference_mode():
            out = model.generate(
                **inputs,
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                streamer=stamps,
            )
        n = int(out.shape[1] - inputs["input_ids"].shape[1])
        return _figures(t0, stamps.times, n, {}, 0)

    try:
        run(1, 4)  # warm-up
        one = [run(1, 1) for _ in range(args.reps)]
        three = [run(3, 1) for _ in range(args.reps)]
        decode = run(0, args.new_tokens)
        return {
            "weights_gib": round(weights / GiB, 3),
            "decode_bytes_per_token": decode_bytes(model),
            "ttft_ms_1_image": _median(one, "ttft_ms"),
            "ttft_ms_3_images": _median(three, "ttft_ms"),
            "ttft_ms_cached_image": None,  # stock generate has no embedding cache
            "decode": decode,
            "decode_tok_s": decode["tok_s"],
            "peak_gib": round(_peak(device) / GiB, 3),
        }
    finally:
        model.to("meta")  # frees the device copy before the caller measures anything else
        _free(device)


# --- the web path ----------------------------------------------------------------------


def web_phase(args: argparse.Namespace, path: Path) -> dict[str, Any]:
    """``create_app(ui=False)`` under uvicorn on loopback; a streaming client of the API."""
    import uvicorn

    from qwen_ui.auth import tenants as tenants_file
    from qwen_ui.auth.tenants import Tenant, TenantsFile
    from qwen_ui.auth.tokens import add_token, new_token
    from qwen_ui.server import create_app

    settings = engine_settings(args, home=args.workdir / f"web-home-{uuid.uuid4().hex[:6]}")
    token, record = new_token("bench")
    tenant = add_token(Tenant(id="bench", name="Bench", kind="local"), record)
    settings.tenants_path.parent.mkdir(parents=True, exist_ok=True)
    tenants_file.save(settings.tenants_path, TenantsFile(tenants={"bench": tenant}))
    app = create_app(settings, ui=False, store=DirStore(path))
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        _wait_started(server)
        rng = random.Random(5)
        text = " ".join(QUESTION.split()[:24])
        _stream(port, token, text, [image_bytes(rng)], 8)  # loads and warms
        for _ in range(args.warmup):
            _stream(port, token, text, [], args.new_tokens)
        runs = [_stream(port, token, text, [], args.new_tokens) for _ in range(args.reps)]
    finally:
        server.should_exit = True
        thread.join(timeout=120)
    client = _median(runs, "tok_s")
    rates = [
        (r["tokens"] - 1) / r["engine_timings"]["decode"]
        for r in runs
        if r["tokens"] > 1 and r["engine_timings"].get("decode")
    ]
    internal = round(statistics.median(rates), 1) if rates else None
    return {
        "client_tok_s": client,
        "engine_internal_tok_s": internal,
        "ratio": round(client / internal, 3) if client and internal else None,
        "client_ttft_ms": _median(runs, "ttft_ms"),
        "runs": runs,
    }


def _stream(port: int, token: str, text: str, images: list[bytes], max_new: int) -> dict[str, Any]:
    boundary = uuid.uuid4().hex
    parts: list[bytes] = []
    for name, value in (("question", text), ("max_new_tokens", str(max_new))):
        head = f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'
        parts.append(f"{head}{value}\r\n".encode())
    for i, data in enumerate(images):
        head = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="images"; '
            f'filename="{i}.jpg"\r\nContent-Type: image/jpeg\r\n\r\n'
        )
        parts.append(head.encode() + data + b"\r\n")
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    conn.request(
        "POST",
        "/api/v1/ask",
        body=body,
        headers={
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "Authorization": f"Bearer {token}",
        },
    )
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"/api/v1/ask answered {response.status}: {response.read()[:300]!r}")
    stamps: list[float] = []
    done: dict[str, Any] = {}
    while line := response.readline():
        if not line.strip():
            continue
        event = json.loads(line)
        if event["type"] == "token":
            stamps.append(time.perf_counter())
        elif event["type"] == "done":
            done = event
        elif event["type"] in ("error", "failed"):
            raise RuntimeError(f"request failed: {event}")
    conn.close()
    if not done or not stamps:
        raise RuntimeError("the stream ended without tokens")
    return _figures(t0, stamps, int(done["completion_tokens"]), done["timings"], 0)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_started(server: Any, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)


# --- memory helpers --------------------------------------------------------------------


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # process max RSS


def _weights(device: torch.device, model: Any) -> int:
    if device.type == "cuda":
        return int(torch.cuda.memory_allocated(device))
    return sum(t.nbytes for t in [*model.parameters(), *model.buffers()])


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# --- main ------------------------------------------------------------------------------


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    cuda = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument(
        "--arch",
        type=arch_list,
        default=["7b"],
        help=f"one or more (comma-separated) of {', '.join(sorted(ARCH))}",
    )
    parser.add_argument("--device", default="cuda" if cuda else "cpu")
    parser.add_argument("--layers", type=int, default=None, help="override decoder layers")
    parser.add_argument("--depth", type=int, default=None, help="override vision depth")
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--reps", type=int, default=3, help="TTFT repetitions (median)")
    parser.add_argument("--warmup", type=int, default=1, help="decode warm-up requests")
    parser.add_argument("--decode-mode", choices=["auto", "eager", "static"], default="auto")
    parser.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=cuda,
        help="CUDA graphs for the decode step (settings.compile_decode; on by default on CUDA)",
    )
    parser.add_argument(
        "--prefill-dequant-rows",
        type=int,
        default=0,
        help="settings.prefill_dequant_rows: prompts longer than this skip the int4 kernel",
    )
    parser.add_argument(
        "--prefill-graph-rows",
        type=int,
        default=0,
        help="settings.prefill_graph_rows: prefills of up to this many tokens replay CUDA graphs",
    )
    parser.add_argument(
        "--fuse",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="settings.fuse_projections: one int4 matmul for q/k/v and one for gate/up",
    )
    parser.add_argument("--a10", action="store_true", help="device limited to 22 GiB")
    parser.add_argument("--web", action="store_true", help="also the HTTP client's view")
    parser.add_argument("--skip-stock", action="store_true")
    parser.add_argument("--skip-engine", action="store_true")
    parser.add_argument("--workdir", type=Path, default=Path("artifacts/bench-decode"))
    parser.add_argument("--json", action="store_true", help="(the default; kept for scripts)")
    return parser.parse_args(argv)


def arch_list(value: str) -> list[str]:
    archs = [a.strip() for a in value.split(",") if a.strip()]
    unknown = [a for a in archs if a not in ARCH]
    if not archs or unknown:
        raise argparse.ArgumentTypeError(f"unknown architecture {unknown or value!r}")
    return archs


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    """One architecture's figures; for several, each one's under ``runs`` and the
    side-by-side ``comparison``."""
    runs = [run_arch(args, arch) for arch in args.arch]
    if len(runs) == 1:
        return runs[0]
    return {"runs": runs, "comparison": compare(runs)}


def compare(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per architecture: decode tokens/s of the engine and of stock ``generate``, the
    engine's decoder bytes read per second, that relative to the first architecture, and
    the engine's speed-up over stock."""
    rows: dict[str, dict[str, Any]] = {}
    for run in runs:
        engine, stock = run.get("engine") or {}, run.get("stock_generate_bf16") or {}
        tok_s, stock_tok_s = engine.get("decode_tok_s"), stock.get("decode_tok_s")
        read = tok_s * engine["decode_bytes_per_token"] / 1e9 if tok_s else None
        rows[run["arch"]] = {
            "engine_tok_s": tok_s,
            "stock_tok_s": stock_tok_s,
            "engine_gb_read_per_s": round(read, 1) if read else None,
            "engine_vs_stock": round(tok_s / stock_tok_s, 2) if tok_s and stock_tok_s else None,
        }
    first = rows[runs[0]["arch"]]["engine_gb_read_per_s"]
    for row in rows.values():
        read = row["engine_gb_read_per_s"]
        row["gb_read_per_s_vs_first"] = round(read / first, 3) if read and first else None
    return rows


def run_arch(args: argparse.Namespace, arch: str) -> dict[str, Any]:
    device = torch.device(args.device)
    t0 = time.perf_counter()
    name, path = arch_checkpoint(args.workdir, arch, args.layers, args.depth)
    if device.type == "cuda" and args.a10:
        limit_device_memory(device, A10_LIMIT)
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "arch": name,
        "profile": "a10 (22 GiB)" if args.a10 else "full device",
        "decode_mode": args.decode_mode,
        "compile": bool(args.compile and device.type == "cuda"),
        "prefill_dequant_rows": args.prefill_dequant_rows,
        "prefill_graph_rows": args.prefill_graph_rows,
        "fuse_projections": args.fuse,
        "checkpoint_s": round(time.perf_counter() - t0, 1),
        "command": "python bench/bench_decode.py " + " ".join(sys.argv[1:]),
    }
    bandwidth = copy_bandwidth(device)
    result["copy_bandwidth_gb_s"] = round(bandwidth / 1e9, 1)
    if not args.skip_engine:
        engine = asyncio.run(engine_phase(args, path))
        engine["bound_tok_s"] = round(bandwidth / engine["decode_bytes_per_token"], 1)
        result["engine"] = engine
        log.info("%s engine: %s", name, json.dumps(engine))  # kept if a later phase is cut
        _free(device)
    if args.web:
        result["web"] = web_phase(args, path)
        _free(device)
    if not args.skip_stock:
        stock = stock_phase(args, path)
        stock["bound_tok_s"] = round(bandwidth / stock["decode_bytes_per_token"], 1)
        result["stock_generate_bf16"] = stock
        log.info("%s stock: %s", name, json.dumps(stock))
    return result


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    result = run_all(parse(argv))
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
