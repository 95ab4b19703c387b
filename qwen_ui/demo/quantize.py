"""Offline AWQ quantization of the demo model into an AutoAWQ GEMM checkpoint.

    python -m qwen_ui.demo.quantize --src qwen_ui/demo/weights/bf16 \\
        --out qwen_ui/demo/weights/awq   (scripts/quantize_demo.sh runs this)

Activation-aware weight quantization (Lin et al., 2023, as implemented by AutoAWQ), written
here in plain torch: the language model's linear layers are quantized to 4 bits in groups
of 128 with zero points; the vision tower, embeddings and norms stay fp16. Calibration
inputs of every linear layer are recorded on generated scenes (training seed range, never
the held-out seeds). For each group of layers sharing an input (q/k/v after the input
norm, gate/up after the post-attention norm, down after up) a per-input-channel scale
``s = x_mean^a / w_mean^(1-a)`` is grid-searched over ``a`` for the least output error of
the quantized layers; the scale is folded into the previous operator. Then each layer's
weight range is clipped per group where that lowers the output error (AutoAWQ's
``auto_clip``; not for q/k). The result is packed with :mod:`qwen_ui.demo.awq_format` and
saved with the key names and ``config.json`` of the official Qwen2.5-VL AWQ repos.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from qwen_ui.demo import awq_format, modelcfg, scenes
from qwen_ui.demo.answer import load_bf16, load_processor, messages

log = logging.getLogger(__name__)

CALIBRATION_BASE = 5 * 10**11  # inside the training seed range, far from held-out seeds
GRID = 20
SHARD = "12MB"
COPY_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",
    "processor_config.json",
    "generation_config.json",
)


@dataclass
class Group:
    """Linear layers that read the same input, and the operator that produces it."""

    prev: nn.Module  # an RMSNorm (weight) or a Linear (output rows)
    linears: list[tuple[str, nn.Linear]]


def layer_groups(model: Any) -> Iterator[Group]:
    for i, layer in enumerate(model.model.language_model.layers):
        name = f"model.language_model.layers.{i}"
        att, mlp = layer.self_attn, layer.mlp
        yield Group(
            layer.input_layernorm,
            [(f"{name}.self_attn.{p}", getattr(att, p)) for p in ("q_proj", "k_proj", "v_proj")],
        )
        if att.v_proj.weight.shape == att.o_proj.weight.shape:  # not with grouped KV heads
            yield Group(att.v_proj, [(f"{name}.self_attn.o_proj", att.o_proj)])
        yield Group(
            layer.post_attention_layernorm,
            [(f"{name}.mlp.{p}", getattr(mlp, p)) for p in ("gate_proj", "up_proj")],
        )
        yield Group(mlp.up_proj, [(f"{name}.mlp.down_proj", mlp.down_proj)])


def quantized_linears(model: Any) -> dict[str, nn.Linear]:
    out: dict[str, nn.Linear] = {}
    for i, layer in enumerate(model.model.language_model.layers):
        name = f"model.language_model.layers.{i}"
        for p in ("q_proj", "k_proj", "v_proj", "o_proj"):
            out[f"{name}.self_attn.{p}"] = getattr(layer.self_attn, p)
        for p in ("gate_proj", "up_proj", "down_proj"):
            out[f"{name}.mlp.{p}"] = getattr(layer.mlp, p)
    return out


def calibration_inputs(
    model: Any, processor: Any, n: int, per_layer: int = 4096
) -> dict[str, torch.Tensor]:
    """Inputs of every quantized linear on ``n`` generated samples (rows subsampled to
    ``per_layer`` with a fixed generator)."""
    linears = quantized_linears(model)
    seen: dict[str, list[torch.Tensor]] = {name: [] for name in linears}
    hooks = [
        lin.register_forward_hook(
            lambda _m, args, _o, name=name: seen[name].append(
                args[0].detach().reshape(-1, args[0].shape[-1]).float()
            )
        )
        for name, lin in linears.items()
    ]
    try:
        with torch.inference_mode():
            for i in range(n):
                item = scenes.sample(CALIBRATION_BASE + i)
                text = (
                    processor.apply_chat_template(
                        messages(len(item.scenes), item.question),
                        add_generation_prompt=True,
                        tokenize=False,
                    )
                    + item.answer
                    + "<|im_end|>"
                )
                model(**processor(text=[text], images=item.images(), return_tensors="pt"))
    finally:
        for hook in hooks:
            hook.remove()
    gen = torch.Generator().manual_seed(0)
    out = {}
    for name, rows in seen.items():
        x = torch.cat(rows)
        if x.shape[0] > per_layer:
            x = x[torch.randperm(x.shape[0], generator=gen)[:per_layer]]
        out[name] = x
    return out


def group_error(x: torch.Tensor, linears: list[tuple[str, nn.Linear]], s: torch.Tensor) -> float:
    """Output error of the group's layers, quantized after scaling inputs by ``s``."""
    err = 0.0
    for _, lin in linears:
        w = lin.weight.detach().float()
        ref = x @ w.t()
        q = awq_format.fake_quantize(w * s) / s
        err += float(((x @ q.t()) - ref).pow(2).mean())
    return err


def search_scale(x: torch.Tensor, linears: list[tuple[str, nn.Linear]]) -> torch.Tensor:
    """AWQ's per-input-channel scale, grid-searched (ratio 0 = no scaling)."""
    x_mean = x.abs().mean(dim=0)
    w = torch.cat([lin.weight.detach().float() for _, lin in linears])
    g = w.reshape(w.shape[0], -1, awq_format.GROUP)
    w_norm = (g.abs() / g.abs().amax(dim=-1, keepdim=True).clamp(min=1e-8)).reshape(w.shape)
    w_mean = w_norm.mean(dim=0)
    best, best_s = float("inf"), torch.ones_like(x_mean)
    for i in range(GRID):
        ratio = i / GRID
        s = (x_mean.pow(ratio) / (w_mean.pow(1 - ratio) + 1e-4)).clamp(min=1e-4)
        s = s / (s.max() * s.min()).sqrt()
        err = group_error(x, linears, s)
        if err < best:
            best, best_s = err, s
    return best_s


@torch.no_grad()
def apply_scale(group: Group, s: torch.Tensor) -> None:
    """Fold ``1/s`` into the previous operator and ``s`` into the layers' input columns."""
    prev = group.prev
    if isinstance(prev, nn.Linear):
        prev.weight.div_(s[:, None])
        if prev.bias is not None:
            prev.bias.div_(s)
    else:
        prev.weight.div_(s)  # type: ignore[operator]
    for _, lin in group.linears:
        lin.weight.mul_(s[None, :])


@torch.no_grad()
def search_clip(x: torch.Tensor, lin: nn.Linear, steps: int = 10) -> None:
    """Shrink each group's weight range where that lowers the output error (auto_clip)."""
    w = lin.weight.detach().float()
    out_f, in_f = w.shape
    groups = in_f // awq_format.GROUP
    xg = x.reshape(x.shape[0], groups, awq_format.GROUP)  # [n, G, 128]
    wg = w.reshape(out_f, groups, awq_format.GROUP)  # [out, G, 128]
    org_max = wg.abs().amax(dim=-1, keepdim=True)
    ref = torch.einsum("ngk,ogk->nog", xg, wg)
    best_err = torch.full((out_f, groups), float("inf"))
    best_max = org_max.clone()
    for i in range(steps):
        cur = org_max * (1 - i / GRID)
        clipped = torch.clamp(wg, -cur, cur).reshape(out_f, in_f)
        q = awq_format.fake_quantize(clipped).reshape(out_f, groups, awq_format.GROUP)
        err = (torch.einsum("ngk,ogk->nog", xg, q) - ref).pow(2).mean(dim=0)
        better = err < best_err
        best_err = torch.where(better, err, best_err)
        best_max = torch.where(better[..., None], cur, best_max)
    lin.weight.copy_(torch.clamp(wg, -best_max, best_max).reshape(out_f, in_f))


def awq(model: Any, inputs: dict[str, torch.Tensor]) -> None:
    """Scale search, scale folding and clipping, in place on the float model."""
    for group in layer_groups(model):
        x = inputs[group.linears[0][0]]
        s = search_scale(x, group.linears)
        apply_scale(group, s)
        for name, _ in group.linears:
            inputs[name] = inputs[name] / s
        log.info(
            "scaled %s (s in %.3f..%.3f)",
            [n for n, _ in group.linears],
            float(s.min()),
            float(s.max()),
        )
    for name, lin in quantized_linears(model).items():
        if not name.endswith(("q_proj", "k_proj")):
            search_clip(inputs[name], lin)


def awq_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """Legacy-named tensors: quantized LM linears packed, everything else fp16."""
    linears = quantized_linears(model)
    state: dict[str, torch.Tensor] = {}
    for key, tensor in model.state_dict().items():
        module = key.rsplit(".", 1)[0]
        if key == "lm_head.weight" and model.config.tie_word_embeddings:
            continue
        if module in linears and key.endswith(".weight"):
            packed = awq_format.pack_linear(*awq_format.quantize(tensor.float()))
            for suffix, value in packed.items():
                state[awq_format.to_legacy_key(f"{module}.{suffix}")] = value
            continue
        state[awq_format.to_legacy_key(key)] = tensor.to(torch.float16).contiguous()
    return state


def legacy_config(model: Any) -> dict[str, Any]:
    """``config.json`` in the layout of the official Qwen2.5-VL AWQ repos (flat text fields,
    ``vision_config``, ``rope_scaling`` with mrope, ``quantization_config``)."""
    text = model.config.text_config
    vision = {k: v for k, v in modelcfg.VISION.items()}
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
        "tie_word_embeddings": model.config.tie_word_embeddings,
        "torch_dtype": "float16",
        "use_cache": True,
        "use_sliding_window": False,
        "vision_config": vision,
        "rope_scaling": {"type": "mrope", "mrope_section": list(rope["mrope_section"])},
        "vocab_size": text.vocab_size,
        "quantization_config": awq_format.quantization_config(),
    }


def save(model: Any, src: Path, out: Path) -> None:
    from huggingface_hub import save_torch_state_dict

    if out.exists():
        for old in out.glob("*.safetensors*"):
            old.unlink()
    out.mkdir(parents=True, exist_ok=True)
    save_torch_state_dict(awq_state_dict(model), str(out), max_shard_size=SHARD)
    (out / "config.json").write_text(json.dumps(legacy_config(model), indent=2) + "\n")
    for name in COPY_FILES:
        if (src / name).exists():
            shutil.copy2(src / name, out / name)


def run(src: Path, out: Path, samples: int) -> None:
    torch.manual_seed(0)
    model = load_bf16(src, torch.float32)
    processor = load_processor(src)
    inputs = calibration_inputs(model, processor, samples)
    log.info("calibrated on %d samples", samples)
    awq(model, inputs)
    save(model, src, out)
    log.info("saved %s", out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="AWQ-quantize the demo model (offline).")
    parser.add_argument("--src", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--samples", type=int, default=128)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    run(args.src, args.out, args.samples)


if __name__ == "__main__":
    main()
