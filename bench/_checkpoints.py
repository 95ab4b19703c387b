"""Random checkpoints in the official layout of Qwen2.5-VL (AutoAWQ int4, group 128, vision
tower in floating point), for the GPU benchmarks: the 7B and 3B architectures at full size,
and a tiny one for CPU dry runs. Written once per folder and reused.

Needs only torch, transformers, safetensors and the demo model's tokenizer files.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from transformers import AutoModelForImageTextToText, Qwen2_5_VLConfig

from qwen_ui.demo import modelcfg
from qwen_ui.engine import awq_format
from qwen_ui.engine.awq_format import to_legacy_key

GiB = 1024**3
DEMO_FILES = Path(__file__).resolve().parent.parent / "qwen_ui" / "demo" / "weights" / "bf16"
AWQ_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
GROUP = 128
# The demo's own model files, not copied: its weights' layout, and qwen_ui.json (the demo
# cannot answer without images; these random-weight stand-ins for Qwen models can).
MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors.index.json",
    "qwen_ui.json",
)
# Shared by the published Qwen2.5-VL sizes: mrope and the vision tower (its output width
# follows the language model's hidden size).
_MROPE = {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]}
_QWEN25_VISION = {
    "depth": 32,
    "hidden_size": 1280,
    "intermediate_size": 3420,
    "num_heads": 16,
    "window_size": 112,
    "fullatt_block_indexes": [7, 15, 23, 31],
}
A10_LIMIT = 22 * GiB

# Qwen2.5-VL-7B-Instruct's published sizes; token ids from the demo tokenizer.
ARCH: dict[str, dict[str, Any]] = {
    "7b": {
        "text": {
            "vocab_size": 152064,
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "num_hidden_layers": 28,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "max_position_embeddings": 128000,
            "rope_parameters": _MROPE,
        },
        "vision": {**_QWEN25_VISION, "out_hidden_size": 3584},
    },
    # Qwen2.5-VL-3B-Instruct's published sizes (its embeddings are tied to the LM head).
    "3b": {
        "tie": True,
        "text": {
            "vocab_size": 151936,
            "hidden_size": 2048,
            "intermediate_size": 11008,
            "num_hidden_layers": 36,
            "num_attention_heads": 16,
            "num_key_value_heads": 2,
            "max_position_embeddings": 128000,
            "rope_parameters": _MROPE,
        },
        "vision": {**_QWEN25_VISION, "out_hidden_size": 2048},
    },
    "tiny": {
        "text": {
            "vocab_size": 2048,
            "hidden_size": 256,
            "intermediate_size": 768,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 32768,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [8, 12, 12],
            },
        },
        "vision": {
            "depth": 2,
            "hidden_size": 128,
            "intermediate_size": 384,
            "num_heads": 2,
            "out_hidden_size": 256,
            "window_size": 112,
            "fullatt_block_indexes": [1],
        },
    },
}


# --- the checkpoint ------------------------------------------------------------------


def limit_device_memory(device: torch.device, limit: int) -> None:
    """Cap this process's allocations on a CUDA ``device`` at ``limit`` bytes (an A10's
    memory on the H200); ``set_per_process_memory_fraction`` wants the device's index."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    total = torch.cuda.get_device_properties(index).total_memory
    torch.cuda.set_per_process_memory_fraction(limit / total, index)


def model_config(arch: str, layers: int | None, depth: int | None) -> Qwen2_5_VLConfig:
    tie = bool(ARCH[arch].get("tie", False))
    text = copy.deepcopy(ARCH[arch]["text"])  # the arches share nested dicts (_MROPE)
    vision = copy.deepcopy(ARCH[arch]["vision"])
    if layers:
        text["num_hidden_layers"] = layers
    if depth:
        vision["depth"] = depth
        vision["fullatt_block_indexes"] = [i for i in vision["fullatt_block_indexes"] if i < depth]
        vision["fullatt_block_indexes"] = vision["fullatt_block_indexes"] or [depth - 1]
    text.update(
        hidden_act="silu",
        rms_norm_eps=1e-6,
        tie_word_embeddings=tie,
        use_sliding_window=False,
        bos_token_id=modelcfg.ENDOFTEXT_ID,
        eos_token_id=modelcfg.IM_END_ID,
        pad_token_id=modelcfg.ENDOFTEXT_ID,
    )
    vision.update(patch_size=14, spatial_merge_size=2, temporal_patch_size=2, in_channels=3)
    vision["hidden_act"] = "silu"
    return Qwen2_5_VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=modelcfg.IMAGE_PAD_ID,
        video_token_id=modelcfg.VIDEO_PAD_ID,
        vision_start_token_id=modelcfg.VISION_START_ID,
        vision_end_token_id=modelcfg.VISION_END_ID,
        tie_word_embeddings=tie,
    )


def random_tensors(config: Qwen2_5_VLConfig, seed: int) -> Iterator[tuple[str, torch.Tensor]]:
    """Every checkpoint tensor, random, in AutoAWQ layout for the decoder's linears."""
    gen = torch.Generator().manual_seed(seed)
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.float16)
    for name, param in model.named_parameters():
        module, _, leaf = name.rpartition(".")
        awq = module.split(".")[-1] in AWQ_LINEARS and ".visual." not in name
        if awq and leaf == "weight":
            out_f, in_f = param.shape
            base = to_legacy_key(module)
            yield f"{base}.qweight", _int32((in_f, out_f // 8), gen)
            yield f"{base}.qzeros", _int32((in_f // GROUP, out_f // 8), gen)
            yield f"{base}.scales", torch.rand(in_f // GROUP, out_f, generator=gen).half() * 2e-3
        elif "norm" in name and leaf == "weight":
            yield to_legacy_key(name), torch.ones(param.shape, dtype=torch.float16)
        else:
            std = 0.02 if param.dim() > 1 else 0.01
            yield (
                to_legacy_key(name),
                (torch.randn(param.shape, generator=gen) * std).half(),
            )


def _int32(shape: tuple[int, int], gen: torch.Generator) -> torch.Tensor:
    return torch.randint(-(2**31), 2**31 - 1, shape, generator=gen, dtype=torch.int64).to(
        torch.int32
    )


def add_arch_options(p: argparse.ArgumentParser) -> None:
    """``--arch`` and ``--workdir`` (where :func:`arch_checkpoint` writes), for the benches
    that build the random checkpoint."""
    p.add_argument("--arch", choices=sorted(ARCH), default="7b")
    p.add_argument("--workdir", type=Path, default=Path("artifacts/bench-decode"))


def arch_checkpoint(
    workdir: Path, arch: str, layers: int | None = None, depth: int | None = None
) -> tuple[str, Path]:
    """The architecture's name (``7b-l28-d32``) and its random checkpoint under ``workdir``,
    written on first use (:func:`write_checkpoint`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = model_config(arch, layers, depth)
    name = f"{arch}-l{config.text_config.num_hidden_layers}-d{config.vision_config.depth}"
    return name, write_checkpoint(workdir / name, config)


def write_checkpoint(out: Path, config: Qwen2_5_VLConfig, seed: int = 0) -> Path:
    """A random AutoAWQ checkpoint (about 7 GB for the 7B architecture), written once."""
    if (out / "config.json").exists():
        return out
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".writing-"))
    shard: dict[str, torch.Tensor] = {}
    size, index = 0, 0
    for name, tensor in random_tensors(config, seed):
        shard[name] = tensor.contiguous()
        size += tensor.numel() * tensor.element_size()
        if size > 2 * GiB:
            index += 1
            save_file(shard, str(tmp / f"model-{index:05d}.safetensors"), {"format": "pt"})
            shard, size = {}, 0
    if shard:
        save_file(shard, str(tmp / f"model-{index + 1:05d}.safetensors"), {"format": "pt"})
    data = config.to_dict()
    data["dtype"] = "float16"
    data["quantization_config"] = awq_format.quantization_config()
    (tmp / "config.json").write_text(json.dumps(data, indent=2))
    for item in DEMO_FILES.iterdir():  # the tokenizer and processor, not the demo weights
        if item.name not in MODEL_FILES and not item.name.endswith(".safetensors"):
            shutil.copy(item, tmp / item.name)
    qwen_bounds = {"shortest_edge": 56 * 56, "longest_edge": 28 * 28 * 16384}  # Qwen's own
    pre = json.loads((tmp / "preprocessor_config.json").read_text())
    pre["size"] = qwen_bounds
    (tmp / "preprocessor_config.json").write_text(json.dumps(pre, indent=2))
    proc = json.loads((tmp / "processor_config.json").read_text())
    proc["image_processor"]["size"] = qwen_bounds
    (tmp / "processor_config.json").write_text(json.dumps(proc, indent=2))
    tmp.rename(out)
    return out


@dataclass(frozen=True)
class DirSnapshot:
    path: Path
    id: str


class DirStore:
    """A store that resolves every model to one folder (the bench's checkpoint)."""

    def __init__(self, path: Path) -> None:
        self.snapshot = DirSnapshot(path, f"bench-{path.name}")

    def resolve(self, model_id: str, revision: str) -> DirSnapshot:
        return self.snapshot

    def is_installed(self, model_id: str, revision: str) -> bool:
        return True
