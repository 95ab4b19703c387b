"""Random checkpoints in the official layout of Qwen2.5-VL (AutoAWQ int4, group 128, vision
tower in floating point), for the GPU benchmarks: the 7B and 3B architectures at full size,
and a tiny one for CPU dry runs; and the same layout for Qwen3-VL's dense architectures
(``qwen3-8b``, ``qwen3-4b``: Qwen3-VL-8B/4B-Instruct's published sizes, DeepStack, interleaved
mrope, q/k norms, 16-px patches) and ``qwen3-tiny``. Written once per folder and reused.

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
from transformers import (
    AutoModelForImageTextToText,
    AutoProcessor,
    PretrainedConfig,
    Qwen2_5_VLConfig,
    Qwen2VLImageProcessor,
    Qwen3VLConfig,
    Qwen3VLProcessor,
    Qwen3VLVideoProcessor,
)

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


# Qwen3-VL (model_type qwen3_vl). Shared by the published dense sizes: interleaved mrope
# and the 16-px vision tower with its learned position embeddings.
_QWEN3_MROPE = {
    "rope_type": "default",
    "rope_theta": 5000000.0,
    "mrope_section": [24, 20, 20],
    "mrope_interleaved": True,
}
_QWEN3_VISION = {"num_heads": 16, "num_position_embeddings": 2304}
ARCH.update(
    {
        # Qwen3-VL-8B-Instruct's published sizes.
        "qwen3-8b": {
            "family": "qwen3_vl",
            "text": {
                "vocab_size": 151936,
                "hidden_size": 4096,
                "intermediate_size": 12288,
                "num_hidden_layers": 36,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "head_dim": 128,
                "max_position_embeddings": 262144,
                "rope_parameters": _QWEN3_MROPE,
            },
            "vision": {
                **_QWEN3_VISION,
                "depth": 27,
                "hidden_size": 1152,
                "intermediate_size": 4304,
                "out_hidden_size": 4096,
                "deepstack_visual_indexes": [8, 16, 24],
            },
        },
        # Qwen3-VL-4B-Instruct's published sizes (embeddings tied to the LM head).
        "qwen3-4b": {
            "family": "qwen3_vl",
            "tie": True,
            "text": {
                "vocab_size": 151936,
                "hidden_size": 2560,
                "intermediate_size": 9728,
                "num_hidden_layers": 36,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "head_dim": 128,
                "max_position_embeddings": 262144,
                "rope_parameters": _QWEN3_MROPE,
            },
            "vision": {
                **_QWEN3_VISION,
                "depth": 24,
                "hidden_size": 1024,
                "intermediate_size": 4096,
                "out_hidden_size": 2560,
                "deepstack_visual_indexes": [5, 11, 17],
            },
        },
        "qwen3-tiny": {
            "family": "qwen3_vl",
            "text": {
                "vocab_size": 2048,
                "hidden_size": 256,
                "intermediate_size": 768,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "head_dim": 64,
                "max_position_embeddings": 32768,
                "rope_parameters": {**_QWEN3_MROPE, "mrope_section": [8, 12, 12]},
            },
            "vision": {
                "depth": 3,
                "hidden_size": 128,
                "intermediate_size": 384,
                "num_heads": 2,
                "num_position_embeddings": 64,
                "out_hidden_size": 256,
                "deepstack_visual_indexes": [0, 1],
            },
        },
    }
)
# The image bounds of each family's own processor (pixels): 4..16384 tokens of 28x28 px for
# Qwen2.5-VL, 64..16384 tokens of 32x32 px for Qwen3-VL.
QWEN25_BOUNDS = {"shortest_edge": 56 * 56, "longest_edge": 28 * 28 * 16384}
QWEN3_BOUNDS = {"shortest_edge": 256 * 256, "longest_edge": 32 * 32 * 16384}


def family(arch: str) -> str:
    """``qwen2_5_vl`` or ``qwen3_vl``: the model type of ``arch``."""
    return str(ARCH[arch].get("family", "qwen2_5_vl"))


# --- the checkpoint ------------------------------------------------------------------


def limit_device_memory(device: torch.device, limit: int) -> None:
    """Cap this process's allocations on a CUDA ``device`` at ``limit`` bytes (an A10's
    memory on the H200); ``set_per_process_memory_fraction`` wants the device's index."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    total = torch.cuda.get_device_properties(index).total_memory
    torch.cuda.set_per_process_memory_fraction(limit / total, index)


def model_config(arch: str, layers: int | None, depth: int | None) -> PretrainedConfig:
    tie = bool(ARCH[arch].get("tie", False))
    text = copy.deepcopy(ARCH[arch]["text"])  # the arches share nested dicts (_MROPE)
    vision = copy.deepcopy(ARCH[arch]["vision"])
    qwen3 = family(arch) == "qwen3_vl"
    if layers:
        text["num_hidden_layers"] = layers
    if depth:
        vision["depth"] = depth
        key = "deepstack_visual_indexes" if qwen3 else "fullatt_block_indexes"
        vision[key] = [i for i in vision[key] if i < depth] or [depth - 1]
    text.update(
        hidden_act="silu",
        rms_norm_eps=1e-6,
        tie_word_embeddings=tie,
        bos_token_id=modelcfg.ENDOFTEXT_ID,
        eos_token_id=modelcfg.IM_END_ID,
        pad_token_id=modelcfg.ENDOFTEXT_ID,
    )
    patch = 16 if qwen3 else 14
    vision.update(patch_size=patch, spatial_merge_size=2, temporal_patch_size=2, in_channels=3)
    vision["hidden_act"] = "gelu_pytorch_tanh" if qwen3 else "silu"
    special = {
        "image_token_id": modelcfg.IMAGE_PAD_ID,
        "video_token_id": modelcfg.VIDEO_PAD_ID,
        "vision_start_token_id": modelcfg.VISION_START_ID,
        "vision_end_token_id": modelcfg.VISION_END_ID,
        "tie_word_embeddings": tie,
    }
    if qwen3:
        text["attention_bias"] = False
        return Qwen3VLConfig(text_config=text, vision_config=vision, **special)
    text["use_sliding_window"] = False
    return Qwen2_5_VLConfig(text_config=text, vision_config=vision, **special)


def random_tensors(config: PretrainedConfig, seed: int) -> Iterator[tuple[str, torch.Tensor]]:
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


def write_checkpoint(out: Path, config: PretrainedConfig, seed: int = 0) -> Path:
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
    if config.model_type == "qwen3_vl":
        write_qwen3_processor(tmp)
    else:
        write_qwen25_processor(tmp)
    tmp.rename(out)
    return out


def write_qwen25_processor(out: Path) -> None:
    """The demo's tokenizer and processor files, with Qwen2.5-VL's own image bounds."""
    for item in DEMO_FILES.iterdir():  # the tokenizer and processor, not the demo weights
        if item.name not in MODEL_FILES and not item.name.endswith(".safetensors"):
            shutil.copy(item, out / item.name)
    pre = json.loads((out / "preprocessor_config.json").read_text())
    pre["size"] = QWEN25_BOUNDS
    (out / "preprocessor_config.json").write_text(json.dumps(pre, indent=2))
    proc = json.loads((out / "processor_config.json").read_text())
    proc["image_processor"]["size"] = QWEN25_BOUNDS
    (out / "processor_config.json").write_text(json.dumps(proc, indent=2))


def write_qwen3_processor(out: Path) -> None:
    """The demo's tokenizer and chat template in a Qwen3-VL processor: 16-px patches merged
    2x2, normalized to [-1, 1], Qwen3-VL's own image bounds."""
    demo: Any = AutoProcessor.from_pretrained(DEMO_FILES, local_files_only=True)  # type: ignore[no-untyped-call]
    image = Qwen2VLImageProcessor(
        patch_size=16,
        merge_size=2,
        temporal_patch_size=2,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
        size=QWEN3_BOUNDS,
    )
    processor = Qwen3VLProcessor(
        image_processor=image,
        tokenizer=demo.tokenizer,
        video_processor=Qwen3VLVideoProcessor(),
        chat_template=demo.chat_template,
    )
    processor.save_pretrained(out)


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
