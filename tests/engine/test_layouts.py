"""The checkpoint layout check (``qwen_ui.engine.layouts``) on tiny checkpoints on disk:
what the engine runs is accepted, everything else refused with a reason a person can act
on; the loader refuses the same before touching the weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from qwen_ui.engine.errors import UnsupportedCheckpoint, UnsupportedModel
from qwen_ui.engine.layouts import check_config, check_folder
from qwen_ui.engine.loading import load_model
from tests.engine.support import build_family_model, write_awq_checkpoint

FP8 = {
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "quant_method": "fp8",
    "weight_block_size": [128, 128],
}
GPTQ = {"bits": 4, "group_size": 128, "quant_method": "gptq", "desc_act": False, "sym": True}
COMPRESSED = {"quant_method": "compressed-tensors", "format": "pack-quantized"}


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("layouts")
    plain = build_family_model("qwen3_vl", root / "plain")
    return {"plain": plain, "awq": write_awq_checkpoint(plain, root / "awq")}


def variant(src: Path, out: Path, **config: Any) -> Path:
    """A copy of ``src`` with ``config.json`` keys replaced (None: removed)."""
    shutil.copytree(src, out)
    data = json.loads((out / "config.json").read_text())
    for key, value in config.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    (out / "config.json").write_text(json.dumps(data))
    return out


def test_the_float_and_awq_qwen3_checkpoints_are_accepted(qwen3: dict[str, Path]) -> None:
    plain, awq = check_folder(qwen3["plain"]), check_folder(qwen3["awq"])
    assert (plain.family, plain.quantization) == ("Qwen3-VL", "none")
    assert (awq.family, awq.quantization, awq.group_size) == ("Qwen3-VL", "awq", 128)
    assert awq.describe() == "Qwen3-VL, AutoAWQ GEMM int4, group 128"


@pytest.mark.parametrize(
    ("quant", "says"),
    [
        (FP8, "FP8 weights are not supported"),
        (GPTQ, "GPTQ weights are not supported"),
        (COMPRESSED, "compressed-tensors (llm-compressor) weights"),
        ({"quant_method": "awq", "bits": 4, "version": "gemv"}, "4-bit GEMV packing"),
        ({"quant_method": "awq", "bits": 8, "version": "gemm"}, "AWQ 8-bit GEMM"),
        ({"quant_method": "awq", "bits": 4, "zero_point": False}, "without zero points"),
        ({"quant_method": "hqq"}, "quantization method hqq are not supported"),
        ({"quant_method": "awq", "bits": "four"}, "quantization_config cannot be read"),
    ],
    ids=[
        "fp8",
        "gptq",
        "compressed-tensors",
        "awq-gemv",
        "awq-8bit",
        "awq-no-zeros",
        "other",
        "unreadable",
    ],
)
def test_unsupported_quantization_is_refused(
    qwen3: dict[str, Path], tmp_path: Path, quant: dict[str, Any], says: str
) -> None:
    folder = variant(qwen3["plain"], tmp_path / "m", quantization_config=quant)
    with pytest.raises(UnsupportedCheckpoint) as info:
        check_folder(folder)
    message = info.value.message("en")
    assert says in message and message.startswith("This checkpoint cannot run")
    assert info.value.message("zh").startswith("此模型检查点无法在本地引擎上运行")


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"model_type": "qwen3_vl_moe"}, "qwen3_vl_moe is a mixture-of-experts model"),
        ({"model_type": "llava"}, "architecture llava is not one the engine runs"),
        ({"model_type": None, "architectures": None}, "architecture unknown"),
        ({"architectures": ["Qwen3VLMoeForConditionalGeneration"]}, "is not Qwen3VLFor"),
        ({"dtype": "float8_e4m3fn"}, "dtype float8_e4m3fn"),
    ],
    ids=["moe", "other-model", "no-type", "other-class", "fp8-dtype"],
)
def test_unknown_architectures_are_refused(config: dict[str, Any], says: str) -> None:
    base: dict[str, Any] = {
        "model_type": "qwen3_vl",
        "architectures": ["Qwen3VLForConditionalGeneration"],
    }
    base.update(config)
    with pytest.raises(UnsupportedCheckpoint, match=says):
        check_config({k: v for k, v in base.items() if v is not None})


def test_every_family_the_engine_runs_is_accepted() -> None:
    for model_type, arch in (
        ("qwen2_vl", "Qwen2VLForConditionalGeneration"),
        ("qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration"),
        ("qwen3_vl", "Qwen3VLForConditionalGeneration"),
    ):
        assert check_config({"model_type": model_type, "architectures": [arch]}).model_type


def test_weights_must_be_safetensors(qwen3: dict[str, Path], tmp_path: Path) -> None:
    folder = variant(qwen3["plain"], tmp_path / "bin")
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    with pytest.raises(UnsupportedCheckpoint, match=r"found: pytorch_model\.bin"):
        check_folder(folder)
    with pytest.raises(UnsupportedCheckpoint, match=r"no config\.json"):
        check_folder(tmp_path / "nothing-here")


def test_awq_tensors_in_gemv_order_are_refused(qwen3: dict[str, Path], tmp_path: Path) -> None:
    """A config that says GEMM over tensors packed the other way round (GEMV's
    ``qweight [out, in / 8]``) is caught in the safetensors headers."""
    folder = variant(qwen3["awq"], tmp_path / "gemv")
    tensors = load_file(str(folder / "model.safetensors"))
    key = next(k for k in tensors if k.endswith("gate_proj.qweight"))  # not square
    q = tensors[key]
    tensors[key] = torch.zeros((q.shape[1] * 8, q.shape[0] // 8), dtype=torch.int32)
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(UnsupportedCheckpoint, match="is not AutoAWQ GEMM packing"):
        check_folder(folder)


def test_awq_config_without_int4_tensors_is_refused(qwen3: dict[str, Path], tmp_path: Path) -> None:
    quant = json.loads((qwen3["awq"] / "config.json").read_text())["quantization_config"]
    folder = variant(qwen3["plain"], tmp_path / "float-as-awq", quantization_config=quant)
    with pytest.raises(UnsupportedCheckpoint, match=r"no \.qweight tensors"):
        check_folder(folder)


def test_the_loader_refuses_before_loading(qwen3: dict[str, Path], tmp_path: Path) -> None:
    folder = variant(qwen3["plain"], tmp_path / "fp8", quantization_config=FP8)
    with pytest.raises(UnsupportedModel, match="FP8 weights"):
        load_model(folder, torch.device("cpu"), torch.float32)
