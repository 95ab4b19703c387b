"""What admission knows about the served model, read from its snapshot without loading it:
the config (sizes, attention implementation), the processor's resize geometry, and the
processor itself (chat template and tokenizer) to count prompt tokens exactly."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoProcessor

from qwen_ui.admission.shape import ModelShape, model_shape
from qwen_ui.admission.tokens import Geometry
from qwen_ui.engine.pipelines import pixel_bounds

log = logging.getLogger(__name__)

IMAGE_PAD = "<|image_pad|>"


@dataclass(frozen=True)
class ModelFacts:
    shape: ModelShape
    geometry: Geometry
    processor: Any  # a Qwen-VL processor: chat template + tokenizer
    weight_file_bytes: int  # size of the checkpoint's tensors on disk

    def prompt_text_tokens(self, messages: Sequence[dict[str, Any]]) -> int:
        """Tokens of the rendered chat prompt, with each image counted as one pad token
        (the engine expands the pads to the image's token count)."""
        text = str(
            self.processor.apply_chat_template(
                list(messages), tokenize=False, add_generation_prompt=True
            )
        )
        ids = self.processor.tokenizer(text)["input_ids"]
        return len(ids) - text.count(IMAGE_PAD)


def load_facts(
    path: Path,
    device: torch.device,
    dtype: torch.dtype,
    min_pixels: int,
    max_pixels: int,
    cache_bucket: int = 0,
    dequant_rows: int = 0,
    fused_projections: bool = False,
) -> ModelFacts:
    """``cache_bucket``: the static KV caches' length step when the engine decodes into
    them (0: a cache grown token by token); ``dequant_rows``: the engine's
    ``prefill_dequant_rows``; ``fused_projections``: its ``fuse_projections``."""
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    processor = AutoProcessor.from_pretrained(  # type: ignore[no-untyped-call]
        path, local_files_only=True
    )
    image_processor = _image_processor_config(path, processor)
    low, high = pixel_bounds(image_processor, min_pixels, max_pixels)  # as the engine does
    geometry = Geometry.of(image_processor, low, high)
    weights = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    shape = model_shape(config, dtype, device.type, cache_bucket, dequant_rows, fused_projections)
    return ModelFacts(shape, geometry, processor, weights)


def _image_processor_config(path: Path, processor: Any) -> Any:
    image_processor = getattr(processor, "image_processor", None)
    if image_processor is not None:
        return image_processor
    return json.loads((path / "preprocessor_config.json").read_text())
