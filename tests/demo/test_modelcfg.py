"""The scaled-down Qwen2.5-VL architecture."""

from __future__ import annotations

import json

import torch

from qwen_ui.demo import modelcfg
from qwen_ui.demo.install import weights_dir


def test_every_linear_is_int4_group_packable() -> None:
    from transformers import Qwen2_5_VLForConditionalGeneration

    with torch.device("meta"):
        model = Qwen2_5_VLForConditionalGeneration(modelcfg.build_config())
    widths = modelcfg.linear_widths(model)
    assert len(widths) > 40
    bad = {k: v for k, v in widths.items() if v[0] % 128 or v[1] % 128}
    assert bad == {}


def test_production_features() -> None:
    cfg = modelcfg.build_config()
    v, t = cfg.vision_config, cfg.text_config
    assert v.window_size == 112 and v.fullatt_block_indexes == [1, 3]  # window attention
    assert v.spatial_merge_size == 2 and v.patch_size == 14  # 2x2 merger
    assert sum(t.rope_parameters["mrope_section"]) * 2 == t.hidden_size // t.num_attention_heads
    assert cfg.image_token_id == modelcfg.IMAGE_PAD_ID


def test_shipped_config_is_this_architecture() -> None:
    shipped = json.loads((weights_dir("bf16") / "config.json").read_text())
    built = modelcfg.build_config().to_dict()
    assert shipped["model_type"] == "qwen2_5_vl"
    for key in (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "vocab_size",
        "rope_parameters",
    ):
        assert shipped["text_config"][key] == built["text_config"][key]
    for key in ("depth", "hidden_size", "window_size", "fullatt_block_indexes"):
        assert shipped["vision_config"][key] == built["vision_config"][key]
    pre = json.loads((weights_dir("bf16") / "preprocessor_config.json").read_text())
    assert pre["size"] == {
        "shortest_edge": modelcfg.MIN_PIXELS,
        "longest_edge": modelcfg.MAX_PIXELS,
    }
