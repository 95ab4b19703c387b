"""The demo model's ``awq`` revision, around a maintained quantizer (gptqmodel).

``training/quantize_demo.sh`` runs three steps; gptqmodel lives in its own environment
(``.venv-quantize``) and the runtime never imports it:

1. ``python -m training.quantize calibration --out DIR`` (this environment): generated
   conversations for calibration, images as PNG files and ``calib.json`` (question, answer,
   image paths), from seeds in the training range, never the held-out ones;
2. ``training/gptq_awq.py`` (the quantizer's environment): gptqmodel's AWQ (activation-aware
   scales and clipping, 4-bit, group 128, zero points, GEMM packing) on those
   conversations; the language model's linear layers only;
3. ``python -m training.quantize official --gptq DIR --src BF16 --out AWQ`` (this
   environment): the official ``Qwen/Qwen2.5-VL-*-Instruct-AWQ`` layout: ``visual.*`` and
   ``model.*`` keys, fp16 for every float tensor, shards of at most 12 MB, the flat
   ``config.json`` with ``quantization_config`` (``modules_to_not_convert: ["visual"]``),
   and the bf16 revision's tokenizer and processor files.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from qwen_ui.demo import modelcfg, scenes
from qwen_ui.engine import awq_format

log = logging.getLogger(__name__)

CALIBRATION_BASE = 5 * 10**11  # inside the training seed range, far from held-out seeds
SHARD = "12MB"
LINEARS = {
    "self_attn": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "mlp": ("gate_proj", "up_proj", "down_proj"),
}
COPY_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",
    "processor_config.json",
    "generation_config.json",
)


# --- step 1: calibration conversations -------------------------------------------------


def write_calibration(out: Path, n: int) -> Path:
    """``n`` conversations (question, answer, image files) under ``out``; ``calib.json``."""
    out.mkdir(parents=True, exist_ok=True)
    items = []
    for i in range(n):
        sample = scenes.sample(CALIBRATION_BASE + i)
        paths = []
        for k, png in enumerate(sample.png_bytes()):
            path = out / f"{sample.seed}_{k}.png"
            path.write_bytes(png)
            paths.append(str(path.resolve()))
        items.append({"question": sample.question, "answer": sample.answer, "images": paths})
    target = out / "calib.json"
    target.write_text(json.dumps(items, ensure_ascii=False, indent=1))
    return target


# --- step 3: the official layout -------------------------------------------------------


def official_state(gptq: Path, tied: bool, layers: int) -> dict[str, torch.Tensor]:
    """gptqmodel's tensors under the official names, floats in fp16; checks that exactly
    the language model's linears are quantized."""
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(gptq.glob("*.safetensors")):
        for key, tensor in load_file(str(shard)).items():
            if key == "lm_head.weight" and tied:
                continue
            value = tensor if not tensor.is_floating_point() else tensor.to(torch.float16)
            state[awq_format.to_legacy_key(key)] = value.contiguous()
    check_quantized(state, layers)
    return state


def check_quantized(state: dict[str, torch.Tensor], layers: int) -> None:
    expected = {
        f"model.layers.{i}.{block}.{name}"
        for i in range(layers)
        for block, names in LINEARS.items()
        for name in names
    }
    found = {key.rsplit(".", 1)[0] for key in state if key.endswith(".qweight")}
    if found != expected:
        raise ValueError(f"quantized modules differ: {sorted(found ^ expected)[:4]}")


def legacy_config(config: Any) -> dict[str, Any]:
    """``config.json`` in the layout of the official Qwen2.5-VL AWQ repos (flat text fields,
    ``vision_config``, ``rope_scaling`` with mrope, ``quantization_config``)."""
    text = config.text_config
    vision = dict(modelcfg.VISION)
    vision.update(
        out_hidden_size=text.hidden_size,
        spatial_patch_size=modelcfg.PATCH,
        tokens_per_second=2,
        in_channels=3,
    )
    rope = text.rope_parameters
    return {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "attention_dropout": 0.0,
        "bos_token_id": modelcfg.ENDOFTEXT_ID,
        "eos_token_id": modelcfg.IM_END_ID,
        "pad_token_id": modelcfg.ENDOFTEXT_ID,
        "vision_start_token_id": modelcfg.VISION_START_ID,
        "vision_end_token_id": modelcfg.VISION_END_ID,
        "vision_token_id": modelcfg.VISION_START_ID + 2,
        "image_token_id": modelcfg.IMAGE_PAD_ID,
        "video_token_id": modelcfg.VIDEO_PAD_ID,
        "hidden_act": text.hidden_act,
        "hidden_size": text.hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": text.intermediate_size,
        "max_position_embeddings": text.max_position_embeddings,
        "max_window_layers": text.num_hidden_layers,
        "model_type": "qwen2_5_vl",
        "num_attention_heads": text.num_attention_heads,
        "num_hidden_layers": text.num_hidden_layers,
        "num_key_value_heads": text.num_key_value_heads,
        "rms_norm_eps": text.rms_norm_eps,
        "rope_theta": rope["rope_theta"],
        "sliding_window": None,
        "tie_word_embeddings": config.tie_word_embeddings,
        "torch_dtype": "float16",
        "use_cache": True,
        "use_sliding_window": False,
        "vision_config": vision,
        "rope_scaling": {"type": "mrope", "mrope_section": list(rope["mrope_section"])},
        "vocab_size": text.vocab_size,
        "quantization_config": awq_format.quantization_config(),
    }


def write_official(gptq: Path, src: Path, out: Path) -> None:
    """The ``awq`` revision at ``out`` from gptqmodel's output and the bf16 revision."""
    from huggingface_hub import save_torch_state_dict
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(src))
    layers = int(config.text_config.num_hidden_layers)
    state = official_state(gptq, bool(config.tie_word_embeddings), layers)
    if out.exists():
        for old in out.glob("*.safetensors*"):
            old.unlink()
    out.mkdir(parents=True, exist_ok=True)
    save_torch_state_dict(state, str(out), max_shard_size=SHARD)
    (out / "config.json").write_text(json.dumps(legacy_config(config), indent=2) + "\n")
    for name in COPY_FILES:
        if (src / name).exists():
            shutil.copy2(src / name, out / name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The demo model's awq revision (offline).")
    steps = parser.add_subparsers(dest="step", required=True)
    cal = steps.add_parser("calibration", help="write calibration conversations")
    cal.add_argument("--out", type=Path, required=True)
    cal.add_argument("--samples", type=int, default=128)
    off = steps.add_parser("official", help="gptqmodel's output in the official layout")
    off.add_argument("--gptq", type=Path, required=True)
    off.add_argument("--src", type=Path, required=True)
    off.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.step == "calibration":
        log.info("wrote %s", write_calibration(args.out, args.samples))
    else:
        write_official(args.gptq, args.src, args.out)
        log.info("saved %s", args.out)


if __name__ == "__main__":
    main()
