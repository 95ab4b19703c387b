"""A request's peak memory on the device, from the model's shape and the request's shape.

The engine runs a request in phases, one after the other on its worker: the vision tower
encodes each new image alone (its activations are freed before the next image), then the
language model prefills the whole prompt once (computing logits for the last position
only), then decodes one token at a time into a KV cache that grows to
``prompt + max_new_tokens`` positions. The estimate is the largest phase, plus a workspace
for kernels and the allocator's rounding (8 MiB and 4 % of that phase):

* **vision** (per image of ``N`` patches, width ``C``): the float32 pixel patches and their
  cast to the model dtype (both alive through the tower), the residual stream, the fused
  qkv projection and rotary's float32 work on q and k, or the MLP's three
  ``[N, intermediate]`` tensors, whichever is larger. With SDPA or flash kernels attention
  keeps no score matrix (transformers 5.24 uses SDPA on CPU and CUDA unless told
  otherwise); with ``eager`` attention each window (or the whole image, in full-attention blocks)
  holds a ``heads × n × n`` float32 score matrix, and that term is added. Qwen3-VL's
  DeepStack mergers keep one more merged output per DeepStack layer through the tower.
  On the CPU the processor's buffers share the budget: its peak for the image's source
  size counts when larger.
* **prefill** (``L`` prompt tokens, ``T`` of them image tokens): the KV cache (a static
  cache is allocated whole first: ``L + max_new_tokens`` rounded up to its length step; a
  dynamic one holds ``L``). A prompt that replays a recorded prefill (static decoding,
  ``L <= prefill_graph_rows``, the CUDA default) adds only its inputs: the embeddings, the
  image features and the positions; its activations live in the graphs' pool, which
  :func:`qwen_ui.admission.budget.graph_reserve` keeps out of the budget. Otherwise the
  eager pass adds the prompt embeddings and the image features (Qwen3-VL: also each
  DeepStack layer's ``[T, hidden]`` features, as handed in and as concatenated), and one
  decoder layer's
  transients (residual, normed input, and the MLP's three ``[L, intermediate]`` tensors,
  four with fused projections; or RMSNorm's float32 copies when those are larger). An AWQ
  model told to dequantize for long prompts (``prefill_dequant_rows``) also holds the
  largest layer's weight being dequantized (gate and up together when the projections are
  fused): on the CPU 5 bytes of work per weight per byte of the compute dtype, the peak
  the profiler measured for ``qwen_ui.engine.awq.dequantize_for_kernel``; on CUDA the
  compiled dequantize holds the weight it writes and nothing more.
* **decode**: the KV cache for ``L + max_new_tokens`` positions (a static cache: that
  rounded up to its length step), plus one layer's keys and values expanded to every query
  head for grouped-query attention (SDPA's ``enable_gqa`` on CUDA; larger than the layer's
  ``torch.cat`` copy while a dynamic cache grows, which is not alive at the same time), and
  the logits of one position.

A **batch** of sequences decoding together (:func:`batch_peak`) holds every sequence's
KV cache, plus the larger of one newcomer's own work (its images and prefill: newcomers
join one at a time between decode steps) and one decode step's transients summed over
the rows. For a single request that is the request's own peak. With continuous batching
the sequences share one slot cache (:func:`_slot_batch`), and the peak is the largest of
what can happen to it: all members arriving together at an empty batch (one prefill, then
the slots), some running while the others join beside their cache (a chunk of prefill at a
time, the running rows' recorded decode steps holding their memory pool meanwhile), and a
decode step over the running rows' bucket; :func:`slot_batch_total` is what the controller
reserves for such a batch, once (:mod:`qwen_ui.admission.share`).

Coefficients below count tensors alive at the same moment in transformers' Qwen2.5-VL
code (``modeling_qwen2_5_vl.py``, 5.x); ``tests/admission/test_estimate.py`` checks the
total against the allocator's measured peak on the CPU, and
``bench/bench_admission_gpu.py`` does the same on CUDA with the full-size model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from qwen_ui.admission.tokens import ImageGrid
from qwen_ui.engine.shapes import ModelShape, TextShape, VisionShape, slot_bucket

MiB = 1024 * 1024
F32 = 4
WORKSPACE_BYTES = 8 * MiB  # kernel workspaces, allocator rounding, small tensors ...
WORKSPACE_SHARE = 0.04  # ... plus this share of the largest phase
DEQUANT_WORK = 5  # dequantize_for_kernel's peak, per weight, in units of the dtype's bytes
# On CUDA the compiled dequantize (:mod:`qwen_ui.engine.prefill`) leaves only the weight it
# writes alive: issue 31's H200 measurement of one 640x480 image (prompt of 499 tokens,
# dynamic cache) was 345 MiB, the prompt's cache and activations beside one bf16 gate/up
# weight (259 MiB); tests/admission/test_estimate_gpu.py checks it there.
DEQUANT_WORK_CUDA = 1
FLASH_KERNELS = ("sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")


@dataclass(frozen=True)
class RequestShape:
    """What a request will put through the model."""

    encode: Sequence[ImageGrid] = ()  # images the vision tower must encode (cache misses)
    image_tokens: int = 0  # image tokens in the prompt (new and earlier turns, cached or not)
    text_tokens: int = 0  # every other prompt token (chat template, questions, answers)
    max_new_tokens: int = 1

    @property
    def prompt_tokens(self) -> int:
        return self.image_tokens + self.text_tokens


@dataclass(frozen=True)
class Estimate:
    """Peak bytes per phase; ``total`` is what admission reserves."""

    vision: int
    prefill: int
    decode: int
    parts: dict[str, int] = field(default_factory=dict)

    @property
    def peak(self) -> int:
        return max(self.vision, self.prefill, self.decode)

    @property
    def workspace(self) -> int:
        return WORKSPACE_BYTES + int(WORKSPACE_SHARE * self.peak)

    @property
    def total(self) -> int:
        return self.peak + self.workspace

    @property
    def peak_phase(self) -> str:
        phases = {"vision": self.vision, "prefill": self.prefill, "decode": self.decode}
        return max(phases, key=lambda k: phases[k])


def estimate(request: RequestShape, model: ModelShape) -> Estimate:
    if model.batch_limit:
        return _batched(request, model)
    vision = max((_image_peak(g, model) for g in request.encode), default=0)
    prefill = prefill_peak(request, model)
    decode = decode_peak(request, model)
    kv = model.kv_bytes_per_token * (request.prompt_tokens + request.max_new_tokens)
    return Estimate(vision, prefill, decode, parts={"kv_cache": kv})


# --- vision tower ---------------------------------------------------------------------


def _image_peak(grid: ImageGrid, model: ModelShape) -> int:
    tower = vision_peak(grid.patches, model)
    if not model.preprocess_on_device:
        return tower
    return max(tower, preprocess_peak(grid, model))


def preprocess_peak(grid: ImageGrid, model: ModelShape) -> int:
    """The processor's own buffers (on the CPU they share the budget): the decoded image
    as a tensor at its source size, the resized float image and the patches. Measured
    with transformers' torchvision backend: about 8 bytes per source pixel plus 1.4 times
    the float32 patches."""
    patches = grid.patches * model.vision.patch_input * F32
    return 8 * grid.source_pixels + int(1.4 * patches)


def vision_peak(patches: int, model: ModelShape) -> int:
    v, b, n = model.vision, model.dtype_bytes, patches
    # the float32 patches the processor made (moved to the device) and the model-dtype copy
    # ``get_image_features`` casts them to; both stay alive through the whole tower
    cast = b if b != F32 else 0
    pixels = n * v.patch_input * (F32 + cast)
    rope = 2 * n * (v.hidden // v.heads) * F32  # cos and sin, float32, all blocks
    block = max(_vision_attention(n, v, b), _vision_mlp(n, v, b))
    merger = n * v.hidden * (b + 2 * F32) + (n // v.merge_unit) * v.out_hidden * 2 * b
    # one more [patches, width] activation: the kernels' workspaces and the window
    # reordering's copy (the H200 measured 14.6 MiB above the counted tensors for one
    # 1024x768 image, 3,996 patches: docs/BENCHMARKS.md)
    workspace = n * v.hidden * b
    deepstack = v.deepstack_layers * (n // v.merge_unit) * v.out_hidden * b
    return pixels + rope + deepstack + max(block, merger) + workspace + _scores(n, model)


def _vision_attention(n: int, v: VisionShape, b: int) -> int:
    # residual, normed input and qkv (3c) in the model dtype, plus rotary's float32 work:
    # q and k upcast, ``q * cos``, ``rotate_half(q)`` and its halves, ``* sin``
    return n * v.hidden * (7 * b + 6 * F32)


def _vision_mlp(n: int, v: VisionShape, b: int) -> int:
    # residual + normed input (+ RMSNorm's float32 leftovers) and act(gate), up, product
    return n * (v.hidden * (2 * b + 4 * F32) + 3 * v.intermediate * b)


def _scores(n: int, model: ModelShape) -> int:
    """Attention score matrices: none with SDPA/flash kernels; eager keeps one per chunk."""
    if model.attn_implementation in FLASH_KERNELS:
        return 0
    v = model.vision
    longest = n if v.full_blocks else min(n, v.window_patches or n)
    # scores in the compute dtype, softmax in float32, cast back
    return v.heads * longest * longest * (2 * model.dtype_bytes + F32)


# --- language model -------------------------------------------------------------------


def cache_positions(request: RequestShape, model: ModelShape) -> int:
    """Positions the request's KV cache holds at its largest: a static cache's whole length
    (prompt + new tokens, rounded up to its length step), else what a dynamic one grows to."""
    length = request.prompt_tokens + request.max_new_tokens
    if model.cache_bucket:
        return max(model.cache_bucket, -(-length // model.cache_bucket) * model.cache_bucket)
    return length


def replayed(length: int, model: ModelShape) -> bool:
    """Whether a prompt of ``length`` tokens replays a recorded prefill (static decoding
    with prefill graphs of up to ``graph_rows`` rows)."""
    return bool(model.cache_bucket) and 0 < length <= model.graph_rows


def prefill_peak(request: RequestShape, model: ModelShape) -> int:
    """The KV cache (a static one is allocated whole before the prefill; a dynamic one
    holds the prompt) beside the prefill's transients: a replayed prefill's inputs only
    (its activations live in the recorded graphs' pool, kept out of the budget), else the
    eager pass's."""
    length = request.prompt_tokens
    positions = cache_positions(request, model) if model.cache_bucket else length
    kv = model.kv_bytes_per_token * positions
    if replayed(length, model):
        return kv + graph_inputs(request, model)
    return kv + eager_prefill(length, request.image_tokens, model)


def graph_inputs(request: RequestShape, model: ModelShape) -> int:
    """A replayed prefill's own allocations: the token table's rows, the image features
    joined and the scattered result (copied into the graph's fixed input), beside the
    features the prompt holds; the 3-D positions; the chosen token's logits work."""
    t, b, length = model.text, model.dtype_bytes, request.prompt_tokens
    rows = 2 * length + 2 * request.image_tokens
    rows += model.vision.deepstack_layers * request.image_tokens  # Qwen3-VL's, as held
    return rows * t.hidden * b + _positions(length, t, b) + _logits(t, b)


def eager_prefill(
    length: int, image_tokens: int, model: ModelShape, chunk: int = 0, prompts: int = 1
) -> int:
    """An eager prefill's transients (the KV cache aside): one layer's keys while the cache
    copies, the prompt embeddings and image features, positions, the largest decoder
    layer's activations, the last positions' logits (one per prompt) and, for long AWQ
    prompts, the weight being dequantized. With ``chunk``, the pass goes that many
    positions at a time: the inputs stay whole, the layer's activations and the
    dequantizing are one chunk's."""
    t, b = model.text, model.dtype_bytes
    passed = min(length, chunk) if chunk else length
    kv_copy = length * t.kv_heads * t.head_dim * b  # one layer's keys while the cache copies
    inputs = length * t.hidden * b + 2 * image_tokens * t.hidden * b
    inputs += 2 * model.vision.deepstack_layers * image_tokens * t.hidden * b
    fused = model.fused_projections
    layer = max(_decoder_attention(passed, t, b, fused), _decoder_mlp(passed, t, b, fused))
    return (
        kv_copy
        + inputs
        + _positions(length, t, b)
        + layer
        + prompts * _logits(t, b)
        + _dequant(passed, model)
    )


def _positions(length: int, t: TextShape, b: int) -> int:
    # 3-D rope: position ids (int64 × 3), float32 angles per axis, cos/sin in the dtype
    return length * (3 * 8 + 2 * t.head_dim * (3 * F32 + b))


def _dequant(length: int, model: ModelShape) -> int:
    if not model.dequant_rows or length <= model.dequant_rows:
        return 0
    t = model.text
    parts = 2 if model.fused_projections else 1  # gate and up as one layer
    qkv = (t.heads + (2 * t.kv_heads if model.fused_projections else 0)) * t.head_dim
    largest = t.hidden * max(parts * t.intermediate, qkv)
    work = DEQUANT_WORK_CUDA if model.device == "cuda" else DEQUANT_WORK
    return largest * work * model.dtype_bytes


def _decoder_attention(length: int, t: TextShape, b: int, fused: bool = False) -> int:
    q, kv = t.heads * t.head_dim, t.kv_heads * t.head_dim
    # residual + normed input + q (with its bias sum) + k, v + rotary temporaries on q
    # + the attention output and its contiguous copy + o_proj; fused projections keep the
    # whole q/k/v output alive while v (a view of it) is
    held = q + kv if fused else 0
    return length * b * (2 * t.hidden + 2 * q + 2 * kv + 3 * q + 2 * q + t.hidden + held)


def _decoder_mlp(length: int, t: TextShape, b: int, fused: bool = False) -> int:
    norm = length * t.hidden * (b + 3 * F32)  # RMSNorm's float32 copies (also the last norm)
    # act(gate), up and their product; fused: the [L, 2 x intermediate] gate/up output
    # stays whole while up (a view of it) is alive
    parts = 4 if fused else 3
    mlp = length * (2 * t.hidden * b + parts * t.intermediate * b)
    return max(norm + length * t.hidden * b, mlp)


def _logits(t: TextShape, b: int) -> int:
    return t.vocab * (b + 2 * F32)  # one position: logits, float copy, softmax


def decode_peak(request: RequestShape, model: ModelShape) -> int:
    return model.kv_bytes_per_token * cache_positions(request, model) + decode_step(request, model)


def decode_step(request: RequestShape, model: ModelShape) -> int:
    """One decode step's transients for this sequence: one layer's keys and values
    expanded to every query head (SDPA's ``enable_gqa``, or ``torch.cat`` while a dynamic
    cache grows), its logits and a few hidden-size vectors."""
    t, b = model.text, model.dtype_bytes
    expanded = 2 * cache_positions(request, model) * max(t.heads, t.kv_heads) * t.head_dim * b
    return expanded + _logits(t, b) + 64 * t.hidden * F32


# --- a batch ----------------------------------------------------------------------------


def batch_peak(requests: Sequence[RequestShape], model: ModelShape) -> int:
    """Peak bytes of sequences decoding as one batch: every sequence's KV cache (slots for
    its whole length), plus the larger of a newcomer's own work (its images encoded, its
    prefill's transients: newcomers join one at a time between decode steps) and a decode
    step over the whole batch (each row's step transients). With continuous batching
    (``batch_limit``) as :func:`_slot_batch` counts it."""
    if not requests:
        return 0
    if model.batch_limit:
        return _slot_batch(requests, model)
    kv = [model.kv_bytes_per_token * cache_positions(r, model) for r in requests]
    # a newcomer's cache is made after its images are encoded: counted in ``kv`` already
    joining = max(
        max(estimate(r, model).vision, prefill_peak(r, model)) - k
        for r, k in zip(requests, kv, strict=True)
    )
    step = sum(decode_step(r, model) for r in requests)
    return sum(kv) + max(joining, step)


def batch_total(requests: Sequence[RequestShape], model: ModelShape) -> int:
    """What a batch needs with the workspace added as for one request: for a single
    request, ``estimate(request, model).total``."""
    peak = batch_peak(requests, model)
    return peak + WORKSPACE_BYTES + int(WORKSPACE_SHARE * peak) if requests else 0


# --- continuous batching ----------------------------------------------------------------


def slot_count(rows: int, model: ModelShape) -> int:
    """Slots of the batch's cache for ``rows`` sequences: all ``batch_limit`` of them
    from the start when its decode steps replay graphs, else the next bucket (1, 2, 4, ...)."""
    if model.batch_graphs:
        return max(model.batch_limit, rows)
    return slot_bucket(rows, model.batch_limit)


def step_rows(rows: int, model: ModelShape) -> int:
    """The rows a decode step of ``rows`` running sequences computes: a replayed step runs
    its batch-size bucket (:func:`qwen_ui.engine.shapes.slot_bucket`), an eager one the rows."""
    return slot_bucket(rows, model.batch_limit) if model.batch_graphs else rows


@dataclass(frozen=True)
class _Slots:
    """A continuous batch's slot cache as :func:`_slot_batch` counts it: ``lengths``, the
    sorted cache positions of its sequences (the slots are as long as the last); ``slots``
    once all have joined; ``rows``, the most sequences it held since it was last empty;
    ``departed``, whether some of those left (their cache stays while the batch is busy);
    ``per_row``, one row's decode-step transients at its length."""

    lengths: Sequence[int]
    slots: int
    rows: int
    departed: bool
    per_row: int

    @property
    def longest(self) -> int:
        return self.lengths[-1]


def _slot_batch(
    requests: Sequence[RequestShape], model: ModelShape, rows: int = 0, longest: int = 0
) -> int:
    """A continuous batch (:mod:`qwen_ui.engine.slots`): one slot cache of
    :func:`slot_count` slots, each as long as the longest sequence's cache. Its peak is the
    largest of what can happen to it:

    * all of ``requests`` join an empty batch together (:func:`_idle_join`);
    * ``k`` of them run while the others join beside their cache (:func:`_join_beside`),
      for every ``k`` from 1 (at worst the largest others join together); ``k = 0`` too
      where members left since the batch was last empty (their cache stays while
      newcomers wait, and none of ``requests`` may be running yet);
    * a decode step over the running rows beside the cache.

    ``rows`` and ``longest`` (cache positions) are the most sequences and the longest cache
    the batch held since it was last empty, before the last of ``requests`` joined: the
    cache never shrinks while the batch is busy. The slots never outnumber ``batch_limit``
    (later requests wait for a free one)."""
    lengths = sorted([cache_positions(r, model) for r in requests] + ([longest] if longest else []))
    members = min(max(len(requests), rows), model.batch_limit)
    slots = slot_count(members, model)
    per_row = decode_step(RequestShape(text_tokens=lengths[-1]), replace(model, cache_bucket=0))
    departed = bool(longest) or rows > len(requests)
    batch = _Slots(lengths, slots, rows, departed, per_row)
    cache = slots * batch.longest * model.kv_bytes_per_token
    peak = max(_idle_join(requests, model, cache), cache + step_rows(members, model) * per_row)
    by_size = sorted(requests, key=lambda r: (r.prompt_tokens, r.image_tokens))
    for running in range(0 if departed else 1, len(requests)):
        peak = max(peak, _join_beside(by_size[running:], running, batch, model))
    return peak


def _idle_join(requests: Sequence[RequestShape], model: ModelShape, cache: int) -> int:
    """Newcomers to an empty batch: their images encoded in one pass; their prefill (a
    lone one that fits replays a recorded graph: its keys and values are staged in the
    graphs' pool, out of the budget; else one padded eager pass into a dynamic cache); then
    the slot cache made beside what the prefill holds while its keys are copied in."""
    held, work = _prefill(requests, model, running=False)
    vision = _encoded_together([g for r in requests for g in r.encode], model)
    return max(vision, work, held + cache)


def _join_beside(
    joining: Sequence[RequestShape], running: int, batch: _Slots, model: ModelShape
) -> int:
    """Newcomers ``joining`` a batch whose slot cache exists, while ``running`` sequences
    decode (0: none any more, members having left while these waited). Beside that cache
    (counted at the longest length, with the slots of the most sequences that ran): the
    newcomers' images and prefill (beside running sequences with a join chunk, their
    images one at a time and their prefill a chunk at a time: :func:`_prefill`); then
    their keys and values beside the cache as it grows (one old layer beside the new:
    :func:`_grown_from`). The running sequences decode meanwhile: a replayed step's
    transients stay allocated in the recorded steps' memory pool (sized for the most rows
    that ran), beside all of it; an eager step runs between two chunks, beside the
    newcomers' keys and values."""
    kv_token = model.kv_bytes_per_token
    ran = max(running, batch.rows) if batch.departed else running
    earlier = slot_count(min(ran, model.batch_limit), model)
    existing = earlier * batch.longest * kv_token
    cache = batch.slots * batch.longest * kv_token
    # a growing cache copies a layer's keys (or values) at a time, the old one then dropped
    grown = _grown_from(batch.lengths, batch.slots, earlier) * kv_token // (2 * model.text.layers)
    chunked = running > 0 and model.join_chunk > 0
    grids = [g for r in joining for g in r.encode]
    if chunked:
        vision = max((_image_peak(g, model) for g in grids), default=0)
    else:
        vision = _encoded_together(grids, model)
    held, work = _prefill(joining, model, running=running > 0)
    if model.batch_graphs:
        pool = step_rows(ran, model) * batch.per_row
        return pool + max(existing + max(vision, work), held + cache + grown)
    between = held + step_rows(running, model) * batch.per_row if chunked else 0
    return max(existing + max(vision, work, between), held + cache + grown)


def _prefill(joining: Sequence[RequestShape], model: ModelShape, running: bool) -> tuple[int, int]:
    """Newcomers prefilled together: (the keys and values they hold once done, the pass's
    peak with them). A lone one whose prompt fits the recorded prefills (beside running
    sequences: and the join chunk) replays a graph: only its inputs are its own."""
    longest = max(r.prompt_tokens for r in joining)
    chunk = model.join_chunk if running else 0
    if len(joining) == 1 and replayed(longest, model) and not (chunk and longest > chunk):
        inputs = graph_inputs(joining[0], model)
        return inputs, inputs
    padded = len(joining) * longest
    kv = model.kv_bytes_per_token * padded
    images = sum(r.image_tokens for r in joining)
    passed = max(chunk, len(joining)) if chunk else 0  # a column per row at least
    return kv, kv + eager_prefill(padded, images, model, passed, len(joining))


def _grown_from(lengths: Sequence[int], slots: int, earlier: int) -> int:
    """Positions of the slot cache before its last growth (one layer of it alive beside
    the new cache while the running sequences' keys and values are copied, layer by
    layer: :meth:`qwen_ui.engine.slots.SlotCache.ensure`): the same slots at the longest
    length below the top, or, where the slots grew (no graphs) from ``earlier``, those at
    the top length. Sequences of one length in a graphed cache never grow it."""
    top = lengths[-1]
    shorter = max((n for n in lengths if n < top), default=0)
    return max(slots * shorter, earlier * top if earlier < slots else 0)


def slot_batch_total(
    requests: Sequence[RequestShape], model: ModelShape, rows: int = 0, longest: int = 0
) -> int:
    """What a continuous batch of ``requests`` needs, its slot cache made for at least
    ``rows`` sequences and ``longest`` positions (what it held since it was last empty,
    before the last of ``requests`` joined), with the
    workspace added as for one request: the controller's one shared reservation for the
    batch (:class:`qwen_ui.admission.share.BatchShare`)."""
    if not requests:
        return 0
    peak = _slot_batch(requests, model, rows, longest)
    return peak + WORKSPACE_BYTES + int(WORKSPACE_SHARE * peak)


def _batched(request: RequestShape, model: ModelShape) -> Estimate:
    """A request as a batch of one (:func:`_slot_batch`), by phase."""
    cache = slot_count(1, model) * cache_positions(request, model) * model.kv_bytes_per_token
    held, work = _prefill([request], model, running=False)
    vision = _encoded_together(request.encode, model)
    prefill = max(work, held + cache)  # the slots are made once the pass is done
    plain = replace(model, cache_bucket=0)
    step = decode_step(RequestShape(text_tokens=cache_positions(request, model)), plain)
    decode = cache + step_rows(1, model) * step
    return Estimate(vision, prefill, decode, parts={"kv_cache": cache})


def _encoded_together(grids: Sequence[ImageGrid], model: ModelShape) -> int:
    """The vision tower over several images in one pass (it attends within each image):
    its activations are those of their patches together."""
    if not grids:
        return 0
    if len(grids) == 1:
        return _image_peak(grids[0], model)
    patches = sum(g.patches for g in grids)
    tower = vision_peak(patches, model)
    if not model.preprocess_on_device:
        return tower
    # the processor resizes one image at a time; their patches together are the tower's
    return max(tower, max(preprocess_peak(g, model) for g in grids))
