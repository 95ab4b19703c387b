"""Test support: a tiny random Qwen2.5-VL model, its tokenizer and processor, and an
AutoAWQ-packed variant written with the official checkpoint key names.

The AWQ tensors are packed and named with ``qwen_ui.engine.awq_format``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForImageTextToText,
    Qwen2_5_VLConfig,
    Qwen2_5_VLProcessor,
    Qwen2Tokenizer,
    Qwen2VLImageProcessor,
    Qwen2VLVideoProcessor,
)

from qwen_ui.engine import awq_format
from qwen_ui.engine import engine as engine_module
from qwen_ui.engine.engine import Engine
from qwen_ui.engine.generate import Generation, Outcome
from qwen_ui.engine.pipelines import stop_token_ids
from training.tokenizer import CHAT_TEMPLATE, QWEN_SPLIT, SPECIAL_TOKENS

# The Qwen pre-tokenizer split, special tokens and chat template: the same as the demo's.
QWEN_PATTERN = QWEN_SPLIT
SPECIAL = list(SPECIAL_TOKENS)
CORPUS = [
    "What shape is in the picture? A red circle on a white background.",
    "How many squares are there? There are three blue squares.",
    "图片里有什么形状？一个红色的圆。有几个正方形？三个蓝色的正方形。",
    "Describe the image. The triangle is green and the star is yellow.",
    "Which picture shows more shapes? The second picture.",
] * 4
GROUP = 128
AWQ_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def build_tokenizer() -> Qwen2Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(CORPUS, trainer)
    state = json.loads(tok.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in state["merges"]]
    tokenizer = Qwen2Tokenizer(vocab=state["vocab"], merges=merges)
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIAL[1:]})
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_processor(tokenizer: Qwen2Tokenizer) -> Qwen2_5_VLProcessor:
    image_processor = Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=112 * 112)
    video_processor = Qwen2VLVideoProcessor()
    return Qwen2_5_VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=CHAT_TEMPLATE,
    )


def tiny_config(tokenizer: Qwen2Tokenizer) -> Qwen2_5_VLConfig:
    ids = tokenizer.convert_tokens_to_ids
    text = {
        "vocab_size": 512,
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": [8, 12, 12],
        },
        "tie_word_embeddings": False,
        "bos_token_id": ids("<|endoftext|>"),
        "eos_token_id": ids("<|im_end|>"),
        "pad_token_id": ids("<|endoftext|>"),
    }
    vision = {
        "depth": 2,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_heads": 2,
        "out_hidden_size": 128,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "window_size": 56,
        "fullatt_block_indexes": [1],
        "in_channels": 3,
    }
    return Qwen2_5_VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,
    )


def build_tiny_model(out: Path, seed: int = 0, endless: bool = False) -> Path:
    """A random bf16-free (float32) tiny Qwen2.5-VL checkpoint with tokenizer + processor.

    ``endless``: no stop token ever wins the argmax, so greedy answers run to the token
    limit (their output rows are zero: a logit of 0 against the best of ~500 random ones)."""
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    processor = build_processor(tokenizer)
    config = tiny_config(tokenizer)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    with torch.no_grad():  # larger weights give a peakier, more decisive random model
        for param in model.parameters():
            if param.dim() >= 2:
                param.normal_(0.0, 0.08)
    model.generation_config.eos_token_id = [config.text_config.eos_token_id]
    if endless:
        with torch.no_grad():
            model.lm_head.weight[stop_token_ids(model, tokenizer)] = 0.0
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


# --- AutoAWQ checkpoints -------------------------------------------------------------


def awq_quantize(weight: torch.Tensor, group: int = GROUP) -> tuple[torch.Tensor, ...]:
    """``weight [out, in]`` → int ``q [in, out]``, ``z [in/g, out]``, fp16 ``s [in/g, out]``:
    :func:`awq_format.quantize` laid out as AutoAWQ stores it (pack with ``pack_columns``)."""
    q, scales, zeros = awq_format.quantize(weight, group)
    return q.t().contiguous(), zeros.t().contiguous(), scales.t().contiguous().half()


def write_awq_checkpoint(src: Path, out: Path) -> Path:
    """Quantize the decoder linears of ``src`` into AutoAWQ GEMM tensors under official
    key names; everything else (vision tower included) stays fp16."""
    model = AutoModelForImageTextToText.from_pretrained(src, dtype=torch.float32)
    tensors: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict().items():
        module, _, leaf = name.rpartition(".")
        if leaf == "weight" and module.split(".")[-1] in AWQ_LINEARS and ".visual." not in name:
            base = awq_format.to_legacy_key(module)
            packed = awq_format.pack_linear(*awq_format.quantize(tensor, GROUP))
            tensors.update({f"{base}.{leaf}": t for leaf, t in packed.items()})
        else:
            tensors[awq_format.to_legacy_key(name)] = tensor.detach().half().contiguous()
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    for item in src.iterdir():
        if item.name not in ("model.safetensors", "config.json"):
            shutil.copy(item, out / item.name)
    config = json.loads((src / "config.json").read_text())
    config["dtype"] = "float16"
    config["quantization_config"] = awq_format.quantization_config()
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


# --- other Qwen-VL families (mechanics only) ------------------------------------------


QWEN2_VL_VISION = {
    "depth": 2,
    "embed_dim": 64,
    "hidden_size": 128,
    "num_heads": 2,
    "mlp_ratio": 2,
    "patch_size": 14,
    "spatial_merge_size": 2,
}
QWEN3_VL_VISION = {
    "depth": 3,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_heads": 2,
    "out_hidden_size": 128,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "num_position_embeddings": 64,
    "deepstack_visual_indexes": [0, 1],
}


def build_family_model(family: str, out: Path, seed: int = 0) -> Path:
    """A tiny random Qwen2-VL or Qwen3-VL checkpoint with tokenizer and processor."""
    from transformers import (
        Qwen2VLConfig,
        Qwen2VLProcessor,
        Qwen3VLConfig,
        Qwen3VLProcessor,
        Qwen3VLVideoProcessor,
    )

    tokenizer = build_tokenizer()
    ids = tokenizer.convert_tokens_to_ids
    special = {
        "image_token_id": ids("<|image_pad|>"),
        "video_token_id": ids("<|video_pad|>"),
        "vision_start_token_id": ids("<|vision_start|>"),
        "vision_end_token_id": ids("<|vision_end|>"),
        "tie_word_embeddings": False,
    }
    text = {
        "vocab_size": 512,
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 64,
        "max_position_embeddings": 4096,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": [8, 12, 12],
        },
        "eos_token_id": ids("<|im_end|>"),
        "tie_word_embeddings": False,
    }
    config: Any
    if family == "qwen2_vl":
        config = Qwen2VLConfig(text_config=text, vision_config=dict(QWEN2_VL_VISION), **special)
        image_processor = Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=112 * 112)
        processor: Any = Qwen2VLProcessor(
            image_processor=image_processor,
            tokenizer=tokenizer,
            video_processor=Qwen2VLVideoProcessor(),
            chat_template=CHAT_TEMPLATE,
        )
    elif family == "qwen3_vl":
        text["rope_parameters"]["mrope_interleaved"] = True  # type: ignore[index]
        config = Qwen3VLConfig(text_config=text, vision_config=dict(QWEN3_VL_VISION), **special)
        image_processor = Qwen2VLImageProcessor(
            min_pixels=64 * 64,
            max_pixels=128 * 128,
            patch_size=16,
            merge_size=2,
            image_mean=[0.5, 0.5, 0.5],
            image_std=[0.5, 0.5, 0.5],
        )
        processor = Qwen3VLProcessor(
            image_processor=image_processor,
            tokenizer=tokenizer,
            video_processor=Qwen3VLVideoProcessor(),
            chat_template=CHAT_TEMPLATE,
        )
    else:
        raise ValueError(family)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() >= 2:
                param.normal_(0.0, 0.08)
    model.generation_config.eos_token_id = [ids("<|im_end|>")]
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def prefill_logits(
    loaded: Any, images: list[Any], question: str = "What shapes are there?"
) -> torch.Tensor:
    """Float logits of every prompt position for one question about ``images`` (a
    :class:`~qwen_ui.engine.pipelines.Loaded`), through the model's own forward."""
    from qwen_ui.engine.generate import prompt_positions
    from qwen_ui.engine.pipelines import Turn

    embeddings = [loaded.vision.encode(i) for i in images]
    prompt = loaded.language.build_prompt([Turn(question, len(images))], embeddings)
    model = loaded.language.model
    positions, _ = prompt_positions(model, prompt)
    with torch.inference_mode():
        out = model(
            input_ids=prompt.input_ids,
            position_ids=positions,
            mm_encoder_outputs={"image": prompt.encoder_outputs(model.device)},
            image_grid_thw=prompt.image_grid_thw,
            mm_token_type_ids=prompt.mm_token_type_ids,
        )
    return out.logits[0].float()


# --- a forced answer ----------------------------------------------------------------------
def force_answer(monkeypatch: pytest.MonkeyPatch, engine: Engine, text: str) -> None:
    """Make the model 'say' ``text`` (the tiny models are random): its tokens go through
    the engine's own detokenizing and events (on the single-request path)."""

    def fake_run(
        generation: Generation,
        stop_ids: Sequence[int],
        on_token: Callable[[int], None],
        cancelled: Callable[[], bool],
    ) -> Outcome:
        tokenizer = engine.pipelines.language().tokenizer
        tokens = [int(t) for t in tokenizer(text)["input_ids"]]
        for token in tokens:
            on_token(token)
        return Outcome(tokens, "stop")

    monkeypatch.setattr(engine_module, "run", fake_run)
    monkeypatch.setattr(engine, "batch", None)  # the single-request loop, which calls ``run``


def interpreted(code: str) -> Any:
    """Run ``code`` in a process of its own under Triton's interpreter (chosen when Triton
    is first imported, so not in this one) from the repository root; the JSON value of
    its last line of output."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
