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
* **prefill** (``L`` prompt tokens, ``T`` of them image tokens): the KV cache for ``L``
  positions, the prompt embeddings and the image features (Qwen3-VL: also each DeepStack
  layer's ``[T, hidden]`` features, as handed in and as concatenated), and one decoder layer's
  transients (residual, normed input, and the MLP's three ``[L, intermediate]`` tensors,
  four with fused projections; or RMSNorm's float32 copies when those are larger). An AWQ
  model told to dequantize for long prompts (``prefill_dequant_rows``) also holds the
  largest layer's weight being dequantized (gate and up together when the projections are
  fused): 5 bytes of work per weight per byte of the compute dtype, the peak the profiler
  measured for ``qwen_ui.engine.awq.dequantize_for_kernel`` on the CPU (the compiled
  version used on CUDA holds less; counted the same until measured there).
* **decode**: the KV cache for ``L + max_new_tokens`` positions (a static cache: that
  rounded up to its length step), plus one layer's keys and values expanded to every query
  head for grouped-query attention (SDPA's ``enable_gqa`` on CUDA; larger than the layer's
  ``torch.cat`` copy while a dynamic cache grows, which is not alive at the same time), and
  the logits of one position.

Coefficients below count tensors alive at the same moment in transformers' Qwen2.5-VL
code (``modeling_qwen2_5_vl.py``, 5.x); ``tests/admission/test_estimate.py`` checks the
total against the allocator's measured peak on the CPU, and
``bench/bench_admission_gpu.py`` does the same on CUDA with the full-size model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from qwen_ui.admission.tokens import ImageGrid
from qwen_ui.engine.shapes import ModelShape, TextShape, VisionShape

MiB = 1024 * 1024
F32 = 4
WORKSPACE_BYTES = 8 * MiB  # kernel workspaces, allocator rounding, small tensors ...
WORKSPACE_SHARE = 0.04  # ... plus this share of the largest phase
DEQUANT_WORK = 5  # dequantize_for_kernel's peak, per weight, in units of the dtype's bytes
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
    deepstack = v.deepstack_layers * (n // v.merge_unit) * v.out_hidden * b
    return pixels + rope + deepstack + max(block, merger) + _scores(n, model)


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


def prefill_peak(request: RequestShape, model: ModelShape) -> int:
    t, b = model.text, model.dtype_bytes
    length = request.prompt_tokens
    kv = model.kv_bytes_per_token * length
    kv_copy = length * t.kv_heads * t.head_dim * b  # one layer's keys while the cache copies
    inputs = length * t.hidden * b + 2 * request.image_tokens * t.hidden * b
    inputs += 2 * model.vision.deepstack_layers * request.image_tokens * t.hidden * b
    # 3-D rope: position ids (int64 × 3), float32 angles per axis, cos/sin in the dtype
    positions = length * (3 * 8 + 2 * t.head_dim * (3 * F32 + b))
    fused = model.fused_projections
    layer = max(_decoder_attention(length, t, b, fused), _decoder_mlp(length, t, b, fused))
    return kv + kv_copy + inputs + positions + layer + _logits(t, b) + _dequant(length, model)


def _dequant(length: int, model: ModelShape) -> int:
    if not model.dequant_rows or length <= model.dequant_rows:
        return 0
    t = model.text
    parts = 2 if model.fused_projections else 1  # gate and up as one layer
    qkv = (t.heads + (2 * t.kv_heads if model.fused_projections else 0)) * t.head_dim
    largest = t.hidden * max(parts * t.intermediate, qkv)
    return largest * DEQUANT_WORK * model.dtype_bytes


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
    t, b = model.text, model.dtype_bytes
    length = request.prompt_tokens + request.max_new_tokens
    if model.cache_bucket:
        length = -(-length // model.cache_bucket) * model.cache_bucket
    kv = model.kv_bytes_per_token * length
    expanded = 2 * length * max(t.heads, t.kv_heads) * t.head_dim * b  # one layer's K and V
    return kv + expanded + _logits(t, b) + 64 * t.hidden * F32
