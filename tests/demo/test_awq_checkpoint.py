"""The shipped ``awq`` revision follows the official Qwen2.5-VL AWQ layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors import safe_open

from qwen_ui.demo.install import weights_dir
from qwen_ui.engine import awq_format

AWQ = weights_dir("awq")


def tensors(path: Path) -> dict[str, tuple[list[int], str]]:
    out = {}
    for shard in sorted(path.glob("*.safetensors")):
        with safe_open(str(shard), "pt") as handle:
            for key in handle.keys():  # noqa: SIM118 (safe_open has no __iter__)
                piece = handle.get_slice(key)
                out[key] = (list(piece.get_shape()), piece.get_dtype())
    return out


@pytest.fixture(scope="module")
def keys() -> dict[str, tuple[list[int], str]]:
    return tensors(AWQ)


def test_quantization_config() -> None:
    config = json.loads((AWQ / "config.json").read_text())
    assert config["quantization_config"] == {
        "bits": 4,
        "group_size": 128,
        "modules_to_not_convert": ["visual"],
        "quant_method": "awq",
        "version": "gemm",
        "zero_point": True,
    }
    assert config["architectures"] == ["Qwen2_5_VLForConditionalGeneration"]
    assert config["model_type"] == "qwen2_5_vl"
    assert config["torch_dtype"] == "float16"
    assert config["rope_scaling"]["type"] == "mrope"
    for flat in ("hidden_size", "num_hidden_layers", "vocab_size", "num_key_value_heads"):
        assert flat in config  # text fields at the top level, as in the official repos
    assert "visual" not in json.dumps(config["vision_config"])


def test_legacy_key_names(keys: dict[str, tuple[list[int], str]]) -> None:
    prefixes = {k.split(".")[0] for k in keys}
    assert prefixes == {"model", "visual"}  # tied embeddings: no lm_head tensor
    assert not any(k.startswith(("model.visual", "model.language_model")) for k in keys)
    assert "visual.patch_embed.proj.weight" in keys
    assert "visual.merger.mlp.0.weight" in keys
    assert "model.embed_tokens.weight" in keys and "model.norm.weight" in keys


def test_language_linears_packed_vision_dense(keys: dict[str, tuple[list[int], str]]) -> None:
    config = json.loads((AWQ / "config.json").read_text())
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    kv = hidden // config["num_attention_heads"] * config["num_key_value_heads"]
    shapes = {
        "q_proj": (hidden, hidden),
        "k_proj": (hidden, kv),
        "v_proj": (hidden, kv),
        "o_proj": (hidden, hidden),
        "gate_proj": (hidden, inter),
        "up_proj": (hidden, inter),
        "down_proj": (inter, hidden),
    }
    for layer in range(config["num_hidden_layers"]):
        for name, (in_f, out_f) in shapes.items():
            part = "self_attn" if name.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) else "mlp"
            base = f"model.layers.{layer}.{part}.{name}"
            assert keys[f"{base}.qweight"] == ([in_f, out_f // 8], "I32")
            assert keys[f"{base}.qzeros"] == ([in_f // awq_format.GROUP, out_f // 8], "I32")
            assert keys[f"{base}.scales"] == ([in_f // awq_format.GROUP, out_f], "F16")
            assert f"{base}.weight" not in keys
    assert not any(
        k.startswith("visual.") and k.endswith(("qweight", "qzeros", "scales")) for k in keys
    )
    assert all(dtype == "F16" for k, (_, dtype) in keys.items() if k.startswith("visual."))


def test_size_limits() -> None:
    for revision in ("bf16", "awq"):
        files = [p for p in weights_dir(revision).iterdir() if p.is_file()]
        assert sum(p.stat().st_size for p in files) <= 25_000_000
        assert max(p.stat().st_size for p in files) <= 15 * 2**20
