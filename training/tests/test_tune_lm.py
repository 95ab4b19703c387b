"""The CPU stage that continues the demo's language model on frozen visual features."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from qwen_ui.demo import modelcfg, scenes
from qwen_ui.demo.install import weights_dir
from training import train, tune_lm


@pytest.fixture(scope="module")
def init() -> Path:
    return Path(weights_dir("bf16"))


@pytest.fixture(scope="module")
def rows(init: Path) -> list[tune_lm.Row]:
    encoder, model = train.Encoder(init), tune_lm.load_model(init).eval()
    samples = [tune_lm.training_sample(i) for i in range(6)]
    samples.append(scenes.sample(5, kind="multi_count"))
    return [tune_lm.encode(encoder, model, s) for s in samples]


def test_each_image_pad_gets_one_visual_token(rows: list[tune_lm.Row]) -> None:
    for row in rows:
        assert row.feats.shape == (int((row.ids == modelcfg.IMAGE_PAD_ID).sum()), 384)
        assert (row.labels != train.IGNORE).sum() >= 2  # the answer and <|im_end|>


def test_training_samples_stay_below_the_held_out_seeds() -> None:
    last = tune_lm.SEED_BASE + 10**9
    assert last < 10**12 <= scenes.held_out(1, tune_lm.HELD_OUT_SET)[0].seed


def _params(module: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.named_parameters()}


def test_steps_train_the_language_model_and_leave_the_vision_tower(
    init: Path, rows: list[tune_lm.Row]
) -> None:
    torch.manual_seed(0)
    model = tune_lm.load_model(init).train()
    params = tune_lm.freeze_vision(model)
    vision, language = _params(model.model.visual), _params(model.model.language_model)
    opt = torch.optim.AdamW(params, lr=1e-3)
    losses = [tune_lm.step(model, opt, params, rows) for _ in range(8)]
    assert losses[-1] < losses[0] * 0.7  # it fits the fixed batch
    assert all(torch.equal(v, vision[k]) for k, v in model.model.visual.named_parameters())
    moved = [
        k
        for k, v in model.model.language_model.named_parameters()
        if not torch.equal(v, language[k])
    ]
    assert len(moved) == len(language)


def test_saved_revision_is_complete_and_loads(
    init: Path, rows: list[tune_lm.Row], tmp_path: Path
) -> None:
    model = tune_lm.load_model(init)
    tune_lm.save_revision(model, init, tmp_path)
    out = tmp_path / "model"
    assert (out / "config.json").read_bytes() == (init / "config.json").read_bytes()
    assert all(f.stat().st_size <= 12 * 10**6 for f in out.glob("*.safetensors"))
    again = tune_lm.load_model(out).eval()
    batch = tune_lm.collate(rows[:2])
    with torch.no_grad():
        a, b = tune_lm.logits_of(model.eval(), batch), tune_lm.logits_of(again, batch)
    assert torch.allclose(a, b, atol=0.05 * a.abs().max().item())  # bf16 rounding only


def test_kinds_restrict_training_and_held_out_samples() -> None:
    only = ("spatial", "exists")
    assert {tune_lm.training_sample(i, tune_lm.Draw(only)).kind for i in range(40)} == set(only)
    held = train.held_out_samples(30, only)
    assert len(held) == 30 and {s.kind for s in held} == set(only)


def test_langs_and_yes_no_share_steer_the_drawn_samples() -> None:
    args = tune_lm.parse_args(["--init", "x", "--out", "y", "--kinds", "spatial", "--langs", "en"])
    draw = tune_lm.draw_of(args)
    assert draw == tune_lm.Draw(("spatial",), ("en",), 0.5)
    drawn = [tune_lm.training_sample(i, replace(draw, yes_no_share=1.0)) for i in range(30)]
    assert {(s.kind, s.lang) for s in drawn} == {("spatial", "en")}
    assert all(s.question.startswith("Is the ") for s in drawn)
    held = tune_lm.held_out(20, draw)
    assert len(held) == 20 and {(s.kind, s.lang) for s in held} == {("spatial", "en")}
    assert held == [s for s in train.held_out_samples(40, ("spatial",)) if s.lang == "en"][:20]
    weighed = tune_lm.Draw(("count", "total"), weights={"count": 0.0, "total:zh": 0.0})
    assert {(s.kind, s.lang) for s in map(tune_lm.training_sample, range(40), [weighed] * 40)} == {
        ("total", "en")
    }
    # with every type, the held-out set is set 7 as before
    assert train.held_out_samples(16) == scenes.held_out(16, tune_lm.HELD_OUT_SET)


def test_follow_up_share_gives_single_image_samples_more_turns() -> None:
    args = ["--init", "x", "--out", "y", "--kinds", "colour,off_grammar"]
    draw = tune_lm.draw_of(
        tune_lm.parse_args([*args, "--follow-up-share", "1", "--follow-ups", "2"])
    )
    assert (draw.follow_up_share, draw.follow_ups) == (1.0, 2)
    drawn = [tune_lm.training_sample(i, draw) for i in range(20)]
    assert {s.kind for s in drawn} == {"colour", "off_grammar"}
    assert all(len(s.follow_ups) == 2 for s in drawn if len(s.scenes) == 1)
    plain = tune_lm.draw_of(tune_lm.parse_args(args))
    assert all(not tune_lm.training_sample(i, plain).follow_ups for i in range(20))


def test_rows_carry_the_yes_no_key(init: Path) -> None:
    encoder, model = train.Encoder(init), tune_lm.load_model(init).eval()
    samples = train.held_out_samples(48, ("spatial", "exists"))
    keys = {tune_lm.encode(encoder, model, s).yes_no for s in samples}
    assert {"spatial: yes", "spatial: no", "exists: yes", "exists: no"} <= keys
    assert keys <= {"", "spatial: yes", "spatial: no", "exists: yes", "exists: no"}
    scored = tune_lm.evaluate(model, [tune_lm.encode(encoder, model, s) for s in samples])
    assert {"spatial: yes", "exists: no", "spatial: yes, en", "exists: no, zh"} <= set(scored)
