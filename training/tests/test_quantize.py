"""The awq revision's offline steps around gptqmodel: calibration files, and gptqmodel's
output rewritten in the official layout (the quantizer itself runs in its own environment,
training/quantize_demo.sh; here its output is stood in for by the shipped revision under
transformers 5's key names, as gptqmodel writes them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

from qwen_ui.demo.install import weights_dir
from qwen_ui.engine import awq_format
from training import quantize


def shipped_state() -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(weights_dir("awq").glob("*.safetensors")):
        state.update(load_file(str(shard)))
    return state


def gptqmodel_like(out: Path, drop: str | None = None) -> Path:
    """The shipped tensors as gptqmodel saves them: module names, one file, fp16/bf16."""
    state = {awq_format.to_module_key(k): v for k, v in shipped_state().items()}
    if drop is not None:
        state = {k: v for k, v in state.items() if not k.startswith(drop)}
    state = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in state.items()}
    out.mkdir(parents=True)
    save_file(state, str(out / "model.safetensors"))
    return out


def test_calibration_files_are_conversations_with_images(tmp_path: Path) -> None:
    target = quantize.write_calibration(tmp_path / "calib", 6)
    items = json.loads(target.read_text())
    assert len(items) == 6 and all(item["question"] and item["answer"] for item in items)
    for item in items:
        for path in item["images"]:
            with Image.open(path) as image:
                assert image.mode == "RGB" and min(image.size) >= 160
    again = quantize.write_calibration(tmp_path / "again", 6)
    assert [i["question"] for i in json.loads(again.read_text())] == [i["question"] for i in items]


def test_gptqmodel_output_becomes_the_official_layout(tmp_path: Path) -> None:
    gptq = gptqmodel_like(tmp_path / "gptq")
    out = tmp_path / "awq"
    quantize.write_official(gptq, weights_dir("bf16"), out)
    written: dict[str, torch.Tensor] = {}
    for shard in sorted(out.glob("*.safetensors")):
        written.update(load_file(str(shard)))
    shipped = shipped_state()
    assert written.keys() == shipped.keys()
    assert all(written[k].dtype == shipped[k].dtype for k in shipped)  # floats back to fp16
    assert (out / "model.safetensors.index.json").exists()
    config = json.loads((out / "config.json").read_text())
    assert config == json.loads((weights_dir("awq") / "config.json").read_text())
    assert (out / "tokenizer.json").read_bytes() == (
        weights_dir("bf16") / "tokenizer.json"
    ).read_bytes()


def test_a_missing_quantized_layer_is_refused(tmp_path: Path) -> None:
    gptq = gptqmodel_like(tmp_path / "gptq", drop="model.language_model.layers.3.mlp.down_proj")
    with pytest.raises(ValueError, match="quantized modules differ"):
        quantize.write_official(gptq, weights_dir("bf16"), tmp_path / "awq")
