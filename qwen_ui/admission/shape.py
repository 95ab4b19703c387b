"""The sizes a memory estimate needs, read from a Qwen-VL model config: nothing per model.

Works for Qwen2-VL (vision width ``embed_dim``, ``mlp_ratio``) and Qwen2.5-VL (vision
``hidden_size``, ``intermediate_size``, window attention with full-attention blocks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from qwen_ui.engine.awq import awq_settings


@dataclass(frozen=True)
class TextShape:
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int


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

    @property
    def kv_bytes_per_token(self) -> int:
        t = self.text
        return 2 * t.layers * t.kv_heads * t.head_dim * self.dtype_bytes


def _get(config: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    if default is None:
        raise ValueError(f"model config lacks {' / '.join(names)}")
    return default


def text_shape(config: Any) -> TextShape:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    hidden = int(_get(text, "hidden_size"))
    heads = int(_get(text, "num_attention_heads"))
    head_dim = getattr(text, "head_dim", None) or hidden // heads
    return TextShape(
        layers=int(_get(text, "num_hidden_layers")),
        hidden=hidden,
        intermediate=int(_get(text, "intermediate_size")),
        heads=heads,
        kv_heads=int(_get(text, "num_key_value_heads", default=heads)),
        head_dim=int(head_dim),
        vocab=int(_get(text, "vocab_size")),
    )


def vision_shape(config: Any, text_hidden: int) -> VisionShape:
    vision = config.vision_config
    width = int(_get(vision, "embed_dim", "hidden_size"))
    ratio = getattr(vision, "mlp_ratio", None)
    inter = getattr(vision, "intermediate_size", None) or int(width * float(ratio or 4))
    patch = int(_get(vision, "patch_size"))
    merge = int(_get(vision, "spatial_merge_size", default=2))
    temporal = int(_get(vision, "temporal_patch_size", default=2))
    channels = int(_get(vision, "in_channels", "in_chans", default=3))
    depth = int(_get(vision, "depth"))
    window = int(getattr(vision, "window_size", 0) or 0)
    full = getattr(vision, "fullatt_block_indexes", None)
    return VisionShape(
        depth=depth,
        hidden=width,
        intermediate=int(inter),
        heads=int(_get(vision, "num_heads")),
        out_hidden=int(_get(vision, "out_hidden_size", default=text_hidden)),
        patch_input=channels * temporal * patch * patch,
        merge_unit=merge * merge,
        window_patches=(window // patch) ** 2 if window else 0,
        full_blocks=len(full) if full is not None else depth,
    )


def model_shape(
    config: Any,
    dtype: torch.dtype,
    device: str = "cuda",
    cache_bucket: int = 0,
    dequant_rows: int = 0,
    fused_projections: bool = False,
) -> ModelShape:
    text = text_shape(config)
    awq = awq_settings(config) is not None  # as the engine's loader decides
    attn = getattr(config, "_attn_implementation", None) or "sdpa"
    return ModelShape(
        text=text,
        vision=vision_shape(config, text.hidden),
        dtype_bytes=torch.empty((), dtype=dtype).element_size(),
        attn_implementation=str(attn),
        preprocess_on_device=device == "cpu",
        cache_bucket=cache_bucket,
        dequant_rows=dequant_rows if awq else 0,
        fused_projections=fused_projections and awq,
    )
