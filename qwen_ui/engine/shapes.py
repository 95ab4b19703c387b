"""Plain data the engine hands admission, and the only engine module admission imports.

- :class:`Placement`: where and how the engine runs (device, static decoding, recorded
  prefills), known from the settings before any model is resolved.
- :class:`ModelFacts`: the served model's sizes and resize geometry, computed once per
  snapshot by the engine (:mod:`qwen_ui.engine.facts`) from its config and processor.
- :class:`AskShape`: one request as the prompt will hold it (its text tokens, the sizes of
  the earlier turns' and the new images, the tokens to generate), computed once per
  request by the engine.
- :class:`Fit`: admission's answer to an :class:`AskShape`: the bytes to reserve, and the
  sizes to downscale the new images to when the request could never fit otherwise.

Nothing here computes anything beyond a product of its own fields.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

Size = tuple[int, int]  # (width, height)


@dataclass(frozen=True)
class Geometry:
    """What the processor's resize arithmetic depends on (its config and the bounds)."""

    patch_size: int
    merge_size: int
    temporal_patch_size: int
    min_pixels: int
    max_pixels: int

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size

    def with_max_pixels(self, max_pixels: int) -> Geometry:
        return replace(self, max_pixels=max(max_pixels, self.min_pixels))


@dataclass(frozen=True)
class TextShape:
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int


def quantized_weights(text: TextShape) -> int:
    """Weights of every decoder layer's q/k/v, o, gate, up and down projections: the
    linears AWQ checkpoints quantize."""
    q, kv = text.heads * text.head_dim, text.kv_heads * text.head_dim
    per_layer = text.hidden * (q + 2 * kv) + q * text.hidden + 3 * text.hidden * text.intermediate
    return text.layers * per_layer


@dataclass(frozen=True)
class VisionShape:
    depth: int
    hidden: int
    intermediate: int
    heads: int
    out_hidden: int
    patch_input: int  # in_channels * temporal_patch_size * patch_size²
    merge_unit: int  # merge_size²
    window_patches: int  # patches per attention window (0: every block sees the whole image)
    full_blocks: int  # blocks attending over the whole image
    deepstack_layers: int = 0  # Qwen3-VL: tower layers whose merged features feed the decoder


@dataclass(frozen=True)
class ModelShape:
    text: TextShape
    vision: VisionShape
    dtype_bytes: int  # compute dtype of activations, KV cache and embeddings
    attn_implementation: str  # "sdpa", "eager", "flash_attention_2", ...
    preprocess_on_device: bool = False  # the processor's buffers count too (the CPU)
    cache_bucket: int = 0  # static KV caches come in multiples of this (0: grown per token)
    # AWQ models: prompts longer than this dequantize each int4 layer's weight in turn
    # (settings.prefill_dequant_rows; 0 = never)
    dequant_rows: int = 0
    fused_projections: bool = False  # settings.fuse_projections: gate/up is one int4 layer
    # prompts of up to this many tokens replay a recorded prefill, whose transients live in
    # a pool kept out of the request budget (settings.prefill_graph_rows; 0 = none)
    graph_rows: int = 0
    device: str = "cuda"  # where the model runs ("cuda" or "cpu")
    # continuous batching (settings.max_batch > 1): at most this many sequences decode
    # together in one slot cache (qwen_ui.engine.slots); 0 = one request at a time
    batch_limit: int = 0
    batch_graphs: bool = False  # the slot cache holds batch_limit slots from the start
    # newcomers joining running sequences are prefilled at most this many positions per
    # pass (settings.batch_prefill_tokens; 0 = in one pass)
    join_chunk: int = 0

    @property
    def kv_bytes_per_token(self) -> int:
        t = self.text
        return 2 * t.layers * t.kv_heads * t.head_dim * self.dtype_bytes


SLOT_BUCKETS = (1, 2, 4, 8, 16, 32, 64)  # a continuous batch's slots and replayed steps


def slot_bucket(rows: int, limit: int) -> int:
    """The smallest slot bucket that holds ``rows`` (at most ``limit``): the slots a
    batch's cache grows to (:mod:`qwen_ui.engine.slots`) and the rows a replayed decode
    step computes (admission counts both)."""
    for size in SLOT_BUCKETS:
        if size >= rows:
            return min(size, max(limit, rows))
    return max(rows, limit)


@dataclass(frozen=True)
class Placement:
    """Where the engine runs and what it keeps between requests."""

    device: str  # "cuda" or "cpu"
    static_decode: bool  # decodes into pooled static KV caches
    cache_bucket: int  # their length step (0: caches grown token by token)
    graph_rows: int  # rows of the longest recorded prefill (0: none recorded)
    batch_limit: int = 0  # continuous batching: most sequences at once (0: one at a time)
    batch_graphs: bool = False  # batched decode steps replayed from graphs (CUDA)
    # AWQ: the most bytes dense copies of the int4 weights may take (0: none kept)
    dense_limit: int = 0
    # AWQ: batch steps of a few rows on the Triton int4 kernel's own copies of the weights
    triton_int4: bool = False


@dataclass(frozen=True)
class ModelFacts:
    snapshot_id: str
    shape: ModelShape
    geometry: Geometry
    weight_file_bytes: int  # size of the checkpoint's tensors on disk
    # AWQ: copies of the int4 weights the engine will keep (dense bf16, the Triton kernel's)
    copy_bytes: int = 0


@dataclass(frozen=True)
class AskShape:
    """One request as the prompt will hold it."""

    tenant: str
    request_id: str
    text_tokens: int  # every prompt token but the image tokens (template, questions, answers)
    past_sizes: tuple[Size, ...]  # images of the earlier turns the prompt keeps, in order
    new_sizes: tuple[Size, ...]  # this turn's images (after decoding and EXIF rotation)
    max_new_tokens: int


@dataclass(frozen=True)
class Fit:
    """Admission's answer: reserve ``nbytes``; with ``max_pixels``, downscale the new
    images to ``new_sizes`` first (the estimate is already theirs). ``sized``: admission's
    own record of the request as it sized it (opaque to the engine), handed back with the
    fit to admission's ``reserve``: a request joining a continuous batch reserves its part
    of the batch's need by it."""

    nbytes: int
    max_pixels: int | None = None
    new_sizes: tuple[Size, ...] = ()
    sized: object = None
