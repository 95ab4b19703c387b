"""The served model's facts, computed once per snapshot from its config and processor
without loading the weights, and the engine's placement from the settings. Admission
gets them as plain data (:mod:`qwen_ui.engine.shapes`).

Works for Qwen2-VL (vision width ``embed_dim``, ``mlp_ratio``), Qwen2.5-VL (vision
``hidden_size``, ``intermediate_size``, window attention with full-attention blocks) and
Qwen3-VL (the same sizes, no windows, ``deepstack_visual_indexes``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoProcessor

from qwen_ui.engine.awq import awq_settings
from qwen_ui.engine.dense_weights import config_copy_bytes
from qwen_ui.engine.fastpath import fast_path
from qwen_ui.engine.generate import CACHE_BUCKET
from qwen_ui.engine.pipelines import Turn, compute_dtype, messages, pick_device, pixel_bounds
from qwen_ui.engine.prefill_graphs import bucket_rows
from qwen_ui.engine.shapes import (
    Geometry,
    ModelFacts,
    ModelShape,
    Placement,
    TextShape,
    VisionShape,
    quantized_weights,
)
from qwen_ui.lang import LANGS, Lang
from qwen_ui.settings import Settings

IMAGE_PAD = "<|image_pad|>"
DECLARED = "qwen_ui.json"  # beside a model's weights: facts the app needs about it


@dataclass(frozen=True)
class Declared:
    """What a model's ``qwen_ui.json`` declares (a model without the file: the defaults,
    right for production Qwen models)."""

    answers_without_images: bool = True  # the demo model cannot answer without an image
    # each image in the prompt is labelled with its number in the conversation
    # ("Picture 4: " before its vision tokens, as Qwen's chat template does with
    # add_vision_id); the demo model was trained without labels
    vision_ids: bool = True
    # what the model understands, in its own words, per language (the page shows it)
    scope: dict[Lang, str] | None = None


def read_declared(path: Path) -> Declared:
    """The facts ``path/qwen_ui.json`` declares; unknown keys are ignored."""
    try:
        body = json.loads((path / DECLARED).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Declared()
    return Declared(
        answers_without_images=bool(body.get("answers_without_images", True)),
        vision_ids=bool(body.get("vision_ids", True)),
        scope=_scope_of(body),
    )


def _scope_of(facts: object) -> dict[Lang, str] | None:
    """The declared scope when it names both languages with some text; else None."""
    scope = facts.get("scope") if isinstance(facts, dict) else None
    if not isinstance(scope, dict):
        return None
    texts = {lang: scope.get(lang) for lang in LANGS}
    if not all(isinstance(text, str) and text.strip() for text in texts.values()):
        return None
    return {lang: str(texts[lang]).strip() for lang in LANGS}


def placement(settings: Settings, device: torch.device | None = None) -> Placement:
    """Where the engine runs (``device``: instead of the settings' choice) and what it
    keeps between requests there."""
    device = device or pick_device(settings.device)
    path = fast_path(settings, device.type)
    batch = batch_limit(settings)
    dense = dense_limit(settings, device)
    rows = path.prefill_graph_rows
    graph_rows = bucket_rows(rows) if rows else 0
    if batch > 1:  # continuous batching: slot caches of CACHE_BUCKET steps, no static loop;
        # recorded prefills for newcomers that join alone
        rows_kernel = device.type == "cuda" and settings.triton_int4 in (True, "auto")
        return Placement(
            device.type,
            False,
            CACHE_BUCKET,
            graph_rows,
            batch,
            path.compile_decode,
            dense,
            rows_kernel,
        )
    static = path.decode_mode == "static"
    return Placement(
        device=device.type,
        static_decode=static,
        cache_bucket=CACHE_BUCKET if static else 0,
        graph_rows=graph_rows,
        dense_limit=dense,
    )


def dense_limit(settings: Settings, device: torch.device) -> int:
    """The most bytes dense copies of int4 weights may take: ``dense_weight_share`` of the
    memory this process may use on a CUDA device (``vram_budget``); 0 elsewhere."""
    if device.type != "cuda" or settings.dense_weight_share <= 0 or not torch.cuda.is_available():
        return 0
    usable = settings.vram_bytes(torch.cuda.get_device_properties(device).total_memory)
    return int(settings.dense_weight_share * usable)


def batch_limit(settings: Settings) -> int:
    """``max_batch``: the most requests the worker decodes together (1 where the worker
    answers one at a time)."""
    return int(getattr(settings, "max_batch", 1))


@dataclass(frozen=True)
class ServedModel:
    """The facts admission gets, and the processor that counts a prompt's text tokens."""

    facts: ModelFacts
    processor: Any  # a Qwen-VL processor: chat template + tokenizer

    def text_tokens(self, turns: Sequence[Turn]) -> int:
        """Tokens of the rendered chat prompt, with each image counted as one pad token
        (the engine expands the pads to the image's token count)."""
        text = str(
            self.processor.apply_chat_template(
                messages(turns), tokenize=False, add_generation_prompt=True
            )
        )
        ids = self.processor.tokenizer(text)["input_ids"]
        return len(ids) - text.count(IMAGE_PAD)


def read_model(path: Path, snapshot_id: str, settings: Settings, where: Placement) -> ServedModel:
    """The model at ``path`` as the engine will serve it with ``settings``."""
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    processor = AutoProcessor.from_pretrained(  # type: ignore[no-untyped-call]
        path, local_files_only=True
    )
    image_processor = _image_processor_config(path, processor)
    low, high = pixel_bounds(image_processor, settings.min_pixels, settings.max_pixels)
    dtype = compute_dtype(torch.device(where.device))
    shape = model_shape(
        config,
        dtype,
        where.device,
        where.cache_bucket,
        settings.prefill_dequant_rows,
        settings.fuse_projections,
        where.graph_rows,
    )
    if where.batch_limit > 1:
        shape = replace(
            shape,
            batch_limit=where.batch_limit,
            batch_graphs=where.batch_graphs,
            join_chunk=settings.batch_prefill_tokens,
        )
    weights = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    geometry = geometry_of(image_processor, low, high)
    facts = ModelFacts(snapshot_id, shape, geometry, weights, weight_copies(config, where))
    return ServedModel(facts, processor)


def dense_copies(config: Any, where: Placement) -> int:
    """Bytes of the dense copies the engine will keep of an AWQ model's int4 weights
    (:mod:`qwen_ui.engine.dense_weights`): all of them when they fit in the placement's
    ``dense_limit``, else none (0)."""
    if awq_settings(config) is None:
        return 0
    nbytes = config_copy_bytes(text_shape(config))
    return nbytes if nbytes <= where.dense_limit else 0


def triton_copies(config: Any, where: Placement) -> int:
    """Bytes of the Triton int4 kernel's copies of an AWQ model's int4 weights
    (:mod:`qwen_ui.engine.triton_int4`) where the placement keeps them, else 0."""
    if not where.triton_int4 or awq_settings(config) is None:
        return 0
    return quantized_weights(text_shape(config)) // 2  # 8 weights in an int32 word


def weight_copies(config: Any, where: Placement) -> int:
    """Bytes of every copy the engine will keep of an AWQ model's int4 weights."""
    return dense_copies(config, where) + triton_copies(config, where)


def weight_copies_at(path: Path, where: Placement) -> int:
    """:func:`weight_copies` for the model at ``path``."""
    if not where.dense_limit and not where.triton_int4:
        return 0
    return weight_copies(AutoConfig.from_pretrained(path, local_files_only=True), where)


def geometry_of(image_processor: Any, min_pixels: int, max_pixels: int) -> Geometry:
    """From a Qwen2-VL image processor (or its config) and the server's pixel bounds."""
    get = image_processor.get if isinstance(image_processor, dict) else _attr(image_processor)
    return Geometry(
        int(get("patch_size", 14)),
        int(get("merge_size", 2)),
        int(get("temporal_patch_size", 2)),
        min_pixels,
        max_pixels,
    )


def _attr(obj: Any) -> Any:
    return lambda name, default: getattr(obj, name, default)


def _image_processor_config(path: Path, processor: Any) -> Any:
    image_processor = getattr(processor, "image_processor", None)
    if image_processor is not None:
        return image_processor
    return json.loads((path / "preprocessor_config.json").read_text())


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
        deepstack_layers=len(getattr(vision, "deepstack_visual_indexes", None) or []),
    )


def model_shape(
    config: Any,
    dtype: torch.dtype,
    device: str = "cuda",
    cache_bucket: int = 0,
    dequant_rows: int = 0,
    fused_projections: bool = False,
    graph_rows: int = 0,
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
        graph_rows=graph_rows,
        device=device,
    )
