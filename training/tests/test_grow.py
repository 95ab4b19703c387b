"""Growing the demo checkpoint's language model deeper within the same size."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
import torch

from qwen_ui.demo import modelcfg, scenes
from training import grow, train


@pytest.fixture(scope="module")
def batches() -> list[train.Batch]:
    return grow.calibration_batches(8, batch_size=4)


def shipped() -> Any:
    return train.build_model(torch.device("cpu"), train.WEIGHTS).eval()


def logits(model: Any, batch: train.Batch) -> torch.Tensor:
    with torch.no_grad():
        return train.forward_logits(model, batch, fast=False, amp=False)


DEPTH = cast(int, modelcfg.TEXT["num_hidden_layers"])
WIDTH = cast(int, modelcfg.TEXT["intermediate_size"])


def test_inserted_layers_change_nothing_the_model_computes(batches: list[train.Batch]) -> None:
    model = shipped()
    before = logits(model, batches[0])
    grow.insert_layers(model, [DEPTH, 1])
    assert torch.equal(logits(model, batches[0]), before)
    text = model.config.text_config
    assert text.num_hidden_layers == DEPTH + 2 and len(text.layer_types) == DEPTH + 2
    layers = grow.decoder_layers(model)
    assert [layer.self_attn.layer_idx for layer in layers] == list(range(DEPTH + 2))
    # the new ones sit at 1 and at the end, with zero output projections
    for i in (1, DEPTH + 1):
        assert float(layers[i].self_attn.o_proj.weight.detach().abs().max()) == 0.0
        assert float(layers[i].mlp.down_proj.weight.detach().abs().max()) == 0.0
    with pytest.raises(ValueError, match="no layer index"):
        grow.insert_layers(model, [DEPTH + 3])


def test_pruning_keeps_the_chosen_units_exactly(batches: list[train.Batch]) -> None:
    model = shipped()
    kept = WIDTH - 128
    # the first units "matter", the last 128 do not: pruning to WIDTH - 128 is the same as
    # zeroing the last 128 columns of every down projection
    importance = [torch.arange(WIDTH, 0, -1).float() for _ in grow.decoder_layers(model)]
    reference = shipped()
    with torch.no_grad():
        for layer in grow.decoder_layers(reference):
            layer.mlp.down_proj.weight[:, kept:] = 0.0
    grow.prune_mlp(model, importance, kept)
    assert torch.allclose(logits(model, batches[0]), logits(reference, batches[0]), atol=1e-5)
    assert model.config.text_config.intermediate_size == kept
    for layer in grow.decoder_layers(model):
        assert layer.mlp.gate_proj.out_features == layer.mlp.down_proj.in_features == kept


def test_importance_is_per_unit_and_non_negative(batches: list[train.Batch]) -> None:
    model = shipped()
    scores = grow.mlp_importance(model, batches)
    assert len(scores) == modelcfg.TEXT["num_hidden_layers"]
    for score in scores:
        assert score.shape == (modelcfg.TEXT["intermediate_size"],)
        assert float(score.min()) >= 0.0 and float(score.max()) > 0.0


def test_a_grown_checkpoint_is_a_complete_revision_within_the_size_bar(tmp_path: Path) -> None:
    from transformers import AutoModelForImageTextToText, AutoProcessor

    kept = WIDTH - 128
    args = ["--out", str(tmp_path), "--mlp", str(kept), "--samples", "8", "--check", "16"]
    grow.main(args)
    folder = tmp_path / "model"
    model = AutoModelForImageTextToText.from_pretrained(str(folder))
    assert model.config.text_config.num_hidden_layers == DEPTH + 1
    assert model.config.text_config.intermediate_size == kept
    assert all(i % 128 == 0 and o % 128 == 0 for i, o in modelcfg.linear_widths(model).values())
    assert AutoProcessor.from_pretrained(str(folder)) is not None
    size = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    assert size <= 25 * 10**6


def test_the_mlp_width_must_pack_into_groups_of_128() -> None:
    with pytest.raises(SystemExit):
        grow.main(["--out", "/nonexistent", "--mlp", "700"])


def test_the_held_out_score_is_the_trainings_own() -> None:
    score = grow.held_out_score(shipped(), 16)
    assert set(score) == {"all", *scenes.KINDS}
    assert score["all"] > 0.8  # the shipped weights: 16 questions, one per type and language
