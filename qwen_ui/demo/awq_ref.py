"""Reference loader for the ``awq`` revision: dequantize to a plain transformers model.

Reads an AutoAWQ GEMM checkpoint with the official Qwen2.5-VL AWQ layout (legacy
``visual.*``/``model.*`` keys, flat ``config.json`` with ``quantization_config``), unpacks
every ``qweight/qzeros/scales`` triple into a dense weight and loads the result into
``Qwen2_5_VLForConditionalGeneration`` in ``dtype``. Weights do not stay 4-bit here: this
is the correctness reference for the demo's tests and evaluation; the engine owns the real
int4 loader.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from qwen_ui.engine import awq_format


def read_config(path: Path) -> dict[str, Any]:
    return dict(json.loads((path / "config.json").read_text()))


def dense_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor under transformers 5 module names, quantized layers dequantized."""
    raw: dict[str, torch.Tensor] = {}
    for shard in sorted(path.glob("*.safetensors")):
        raw.update(load_file(str(shard)))
    group = int(read_config(path)["quantization_config"]["group_size"])
    state: dict[str, torch.Tensor] = {}
    for key, tensor in raw.items():
        module, suffix = key.rsplit(".", 1)
        if suffix in ("qzeros", "scales"):
            continue
        if suffix == "qweight":
            state[awq_format.to_module_key(f"{module}.weight")] = awq_format.dequantize(
                tensor, raw[f"{module}.qzeros"], raw[f"{module}.scales"], group
            )
        else:
            state[awq_format.to_module_key(key)] = tensor
    return state


def build_config(path: Path) -> Any:
    """The checkpoint's config without its quantization section (weights arrive dense)."""
    from transformers import Qwen2_5_VLConfig

    raw = read_config(path)
    raw.pop("quantization_config", None)
    return Qwen2_5_VLConfig.from_dict(raw)


def load_awq_dequantized(path: Path, dtype: torch.dtype = torch.bfloat16) -> Any:
    from transformers import GenerationConfig, Qwen2_5_VLForConditionalGeneration

    config = build_config(path)
    model = Qwen2_5_VLForConditionalGeneration(config)
    state = dense_state_dict(path)
    if config.tie_word_embeddings:
        state["lm_head.weight"] = state["model.language_model.embed_tokens.weight"]
    model.load_state_dict(state, strict=True)
    if (path / "generation_config.json").exists():
        model.generation_config = GenerationConfig.from_pretrained(str(path))
    return model.to(dtype).eval()
