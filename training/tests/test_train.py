"""Training-side helpers: auxiliary vision labels and the gradient scaling."""

from __future__ import annotations

import argparse
import itertools
import json
import math
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from qwen_ui.demo import locate, modelcfg, scenes
from qwen_ui.demo.install import weights_dir
from qwen_ui.demo.modelcfg import PATCH
from qwen_ui.engine.pipelines import Turn, messages
from training import train


def scene() -> scenes.Scene:
    # 224 x 168 px: a 16 x 12 patch grid (no resize), 8 x 6 merged tokens of 28 px
    square = scenes.Shape("square", "red", (215, 40, 40), cx=42.0, cy=42.0, r=30.0)
    star = scenes.Shape("star", "blue", (40, 80, 215), cx=170.0, cy=112.0, r=40.0)
    return scenes.Scene(224, 168, (250, 250, 250), (square, star))


def test_token_labels_mark_the_covering_shape() -> None:
    labels = train.token_labels(scene(), grid_h=168 // PATCH, grid_w=224 // PATCH)
    assert labels.shape == (6 * 8, 3 + train.N_RELATION + train.N_RANK)
    grid = labels[:, :2].reshape(6, 8, 2)
    red_square = (1 + scenes.SHAPES.index("square"), 1 + list(scenes.COLOURS).index("red"))
    blue_star = (1 + scenes.SHAPES.index("star"), 1 + list(scenes.COLOURS).index("blue"))
    # the square spans 16.5..67.5 px: it fills token (1, 1) (28..56 px); it covers only
    # 11.5 x 11.5 px of token (0, 0) (< 1/4) and 11.5 x 28 px of token (0, 1) (> 1/4)
    assert tuple(grid[1, 1].tolist()) == red_square
    assert tuple(grid[0, 0].tolist()) == (0, 0)
    assert tuple(grid[0, 1].tolist()) == red_square
    # the star's centre (170, 112) is in token (4, 6)
    assert tuple(grid[4, 6].tolist()) == blue_star
    assert tuple(grid[5, 0].tolist()) == (0, 0)
    assert tuple(grid[0, 7].tolist()) == (0, 0)
    assert set(labels[:, 0].tolist()) == {0, red_square[0], blue_star[0]}


def test_each_shape_names_itself_in_the_token_holding_its_centre() -> None:
    labels = train.token_labels(scene(), grid_h=168 // PATCH, grid_w=224 // PATCH)
    centres = labels[:, 2].view(6, 8)
    red_square, blue_star = scene().shapes
    # centres (42, 42) and (170, 112) px lie in 28 px blocks (1, 1) and (4, 6)
    assert centres[1, 1] == train.joint_code(red_square)
    assert centres[4, 6] == train.joint_code(blue_star)
    assert int((centres > 0).sum()) == 2
    codes = {
        train.joint_code(scenes.Shape(k, c, (0, 0, 0), 0, 0, 1))
        for k in scenes.SHAPES
        for c in scenes.COLOURS
    }
    assert codes == set(range(1, train.N_JOINT))


def test_each_centre_token_names_the_shapes_around_it() -> None:
    labels = train.token_labels(scene(), grid_h=168 // PATCH, grid_w=224 // PATCH)
    bags = labels[:, 3 : 3 + train.N_RELATION].view(6, 8, train.N_RELATION)
    red_square, blue_star = scene().shapes
    left, right = scenes.RELATIONS.index("left"), scenes.RELATIONS.index("right")
    # the square (16.5..67.5 px across) is clearly left of the star (130..210 px); on the
    # other axis their extents touch (square to 72 px, star from 72 px): not "above"
    star_bags = [0] * train.N_RELATION
    star_bags[left] = 1 << (train.joint_code(red_square) - 1)
    square_bags = [0] * train.N_RELATION
    square_bags[right] = 1 << (train.joint_code(blue_star) - 1)
    assert bags[4, 6].tolist() == star_bags and bags[1, 1].tolist() == square_bags
    assert int((bags != 0).any(-1).sum()) == 2  # nothing but the two centre tokens


def test_relation_bags_say_what_the_spatial_questions_ask() -> None:
    """On generated scenes: a class's bit is in a shape's bag for a relation exactly when
    some shape of that class is in that relation to it by the grammar's ``holds`` (scenes
    whose centres share no token)."""
    checked = 0
    for seed in range(40):
        item = scenes.sample(seed, kind="spatial")
        sc = item.scenes[0]
        h, w = 2 * (sc.height // 28), 2 * (sc.width // 28)
        bags = train.relation_labels(sc, h, w)
        tokens = [train.centre_token(sc, s, h, w) for s in sc.shapes]
        if len(set(tokens)) < len(tokens):
            continue
        for s, at in zip(sc.shapes, tokens, strict=True):
            others = [o for o in sc.shapes if o is not s]
            for i, rel in enumerate(scenes.RELATIONS):
                for code in range(1, train.N_JOINT):  # a class's bit: any shape of it holds
                    bit = (int(bags[at, i]) >> (code - 1)) & 1
                    holds = any(
                        train.joint_code(o) == code and scenes.holds(rel, o, s) for o in others
                    )
                    assert bit == int(holds), (seed, rel, code)
                    checked += int(holds)
    assert checked > 50


def test_every_token_of_a_shape_carries_its_ranks() -> None:
    labels = train.token_labels(scene(), grid_h=168 // PATCH, grid_w=224 // PATCH)
    ranks = labels[:, 3 + train.N_RELATION :]
    covered = labels[:, 0] > 0
    # the square (top left) has no shape left of or above it; the star has the square
    # left of it and above it (their centres: 42, 42 and 170, 112)
    square = labels[:, 0] == 1 + scenes.SHAPES.index("square")
    assert ranks[square].tolist() == [[0, 0]] * int(square.sum())
    assert ranks[covered & ~square].tolist() == [[1, 1]] * int((covered & ~square).sum())
    assert ranks[~covered].tolist() == [[-1, -1]] * int((~covered).sum())


def test_ranks_answer_the_yes_no_spatial_questions() -> None:
    """On generated yes/no spatial questions: comparing the two named shapes' ranks along
    the relation's axis gives the grammar's answer, every time."""
    axis = {"left": (0, 1), "right": (0, -1), "above": (1, 1), "below": (1, -1)}
    checked = 0
    for seed in range(300):
        item = scenes.sample(seed, "spatial", "en", yes_no_share=1.0)
        sc = item.scenes[0]
        words = item.question.rstrip("?").split()
        named = [
            next(s for s in sc.shapes if (s.colour, s.kind) == (words[i - 1], words[i]))
            for i, w in enumerate(words)
            if w in scenes.SHAPES
        ]
        rel = next(r for r in scenes.RELATIONS if r in words)
        ranks = scenes.shape_ranks(sc)
        a, b = (ranks[sc.shapes.index(s)] for s in named)
        col, sign = axis[rel]
        assert ((b[col] - a[col]) * sign > 0) == (item.answer == "yes"), seed
        checked += 1
    assert checked == 300


def test_two_shapes_of_one_class_keep_their_own_ranks() -> None:
    left = scenes.Shape("circle", "red", (215, 40, 40), cx=42.0, cy=84.0, r=30.0)
    right = scenes.Shape("circle", "red", (215, 40, 40), cx=182.0, cy=84.0, r=30.0)
    labels = train.token_labels(scenes.Scene(224, 168, (250, 250, 250), (left, right)), 12, 16)
    ranks = labels[:, 3 + train.N_RELATION :].view(6, 8, train.N_RANK)
    assert ranks[3, 1].tolist() == [0, 0] and ranks[3, 6].tolist() == [1, 0]


def test_token_labels_follow_the_resize() -> None:
    # the same scene drawn at twice the size but labelled on the same grid
    big = scene()
    big = scenes.Scene(
        448,
        336,
        big.background,
        tuple(
            scenes.Shape(s.kind, s.colour, s.rgb, s.cx * 2, s.cy * 2, s.r * 2) for s in big.shapes
        ),
    )
    small = train.token_labels(scene(), 12, 16)
    assert torch.equal(train.token_labels(big, 12, 16), small)


def processor_row(encode: train.Encoder, item: scenes.Sample) -> dict[str, torch.Tensor]:
    """The reference: the processor called on the chat template, as the engine calls it
    (``qwen_ui.engine.pipelines.messages``), up to the last question."""
    turns = [Turn(item.question, len(item.scenes), item.answer)]
    turns += [Turn(q, 0, a) for q, a, _ in item.follow_ups]
    last = turns[-1]
    turns[-1] = Turn(last.question, last.image_count)
    prompt = encode.processor.apply_chat_template(
        messages(turns), add_generation_prompt=True, tokenize=False
    )
    return dict(encode.processor(text=[prompt], images=item.images(), return_tensors="pt"))


def test_encoder_gives_what_the_processor_gives() -> None:
    encode = train.Encoder(train.WEIGHTS)
    items = [
        scenes.sample(seed, kind=kind, lang=lang)
        for seed, lang in ((11, "en"), (12, "zh"))
        for kind in scenes.KINDS
    ]
    assert {i.lang for i in items} == {"en", "zh"} and max(len(i.scenes) for i in items) == 3
    for item in items:
        row, ref = encode(item), processor_row(encode, item)
        prompt = ref["input_ids"][0]
        assert torch.equal(row["input_ids"][: len(prompt)], prompt), item.question
        assert torch.equal(row["mm_token_type_ids"][: len(prompt)], ref["mm_token_type_ids"][0])
        assert not row["mm_token_type_ids"][len(prompt) :].any()
        assert torch.equal(row["image_grid_thw"], ref["image_grid_thw"])
        pixels = train.restore_pixels(row["pixel_u8"], encode.mean, encode.std)
        assert torch.allclose(pixels, ref["pixel_values"], atol=1e-6), item.question


def test_follow_up_turns_continue_the_conversation() -> None:
    encode = train.Encoder(train.WEIGHTS)
    for lang in ("en", "zh"):
        item = scenes.with_follow_up(scenes.sample(5, kind="colour", lang=lang))
        assert len(item.follow_ups) == 1
        row, ref = encode(item), processor_row(encode, item)
        prompt = ref["input_ids"][0]
        assert torch.equal(row["input_ids"][: len(prompt)], prompt)
        labelled = row["labels"] != train.IGNORE
        tokens = encode.processor.tokenizer
        first = tokens(item.answer + "<|im_end|>")["input_ids"]
        second = tokens(item.follow_ups[0].answer + "<|im_end|>")["input_ids"]
        assert row["labels"][labelled].tolist() == first + second
        assert labelled[len(prompt) :].all()  # the last answer ends the row


def test_encoder_labels_one_row_per_image_token() -> None:
    encode = train.Encoder(train.WEIGHTS)
    item = scenes.sample(3, kind="multi_count")
    row = encode(item)
    n_tokens = int((row["input_ids"] == modelcfg.IMAGE_PAD_ID).sum())
    assert row["vision_labels"].shape == (n_tokens, 3 + train.N_RELATION + train.N_RANK)
    assert int((row["vision_labels"][:, 0] > 0).sum()) > 0
    shapes = sum(len(s.shapes) for s in item.scenes)
    assert 0 < int((row["vision_labels"][:, 2] > 0).sum()) <= shapes


def test_scale_grad_keeps_values_and_scales_gradient() -> None:
    x = torch.tensor([1.0, -2.0], requires_grad=True)
    y = train.scale_grad(x, 0.25)
    assert torch.equal(y, x)
    y.sum().backward()  # type: ignore[no-untyped-call]
    assert x.grad is not None
    assert torch.allclose(x.grad, torch.full((2,), 0.25))


def test_aux_head_with_weight_zero_is_only_a_probe() -> None:
    torch.manual_seed(0)
    feats = torch.randn(5, 384, requires_grad=True)
    labels = torch.tensor([[0, 0, 0], [1, 2, 0], [2, 3, 9], [3, 4, 0], [4, 6, 24]])
    labels = torch.cat([labels, torch.zeros(5, train.N_RELATION, dtype=torch.long)], dim=1)
    head = train.AuxHead(384, weight=0.0)
    loss, stats = head.loss(feats, labels)
    loss.backward()  # type: ignore[no-untyped-call]
    assert feats.grad is not None and float(feats.grad.abs().max()) == 0.0
    assert head.proj.weight.grad is not None and float(head.proj.weight.grad.abs().max()) > 0
    assert int(stats["on"]) == 4 and int(stats["centre"]) == 2


def test_the_relation_loss_counts_only_when_weighted() -> None:
    torch.manual_seed(0)
    feats = torch.randn(4, 384, requires_grad=True)
    labels = torch.tensor([[1, 2, 9], [2, 3, 0], [4, 6, 24], [0, 0, 0]])
    bags = torch.tensor([[1 << 3, 0, 0, 0], [0, 0, 0, 0], [0, 1 << 8, 0, 1], [0, 0, 0, 0]])
    labels = torch.cat([labels, bags], dim=1)
    off = train.AuxHead(384, weight=1.0)
    loss_off, stats_off = off.loss(feats, labels)
    assert "relation_hit" not in stats_off
    on = train.AuxHead(384, weight=1.0, relation_weight=2.0)
    loss_on, stats = on.loss(feats, labels)
    # a zero head: every logit 0, so each of the 4 x 24 bits of a centre token costs log 2
    bits = 4 * (train.N_JOINT - 1)
    start = sum(on.widths[:3])  # the relation bags' outputs
    rel = slice(start, start + bits)
    assert torch.allclose(loss_on - loss_off, torch.tensor(2.0 * bits * math.log(2)))
    assert int(stats["relation_hit"]) == 0  # a logit of 0 calls every bit absent: not > 0
    assert (int(stats["relation_true"]), int(stats["relation_said"])) == (3, 0)
    loss_on.backward()  # type: ignore[no-untyped-call]
    grad = on.proj.weight.grad
    assert grad is not None and float(grad[rel].abs().max()) > 0
    with torch.no_grad():  # a head that calls every bit absent is right on empty bags
        on.proj.bias[rel] = -10.0
    _, stats = on.loss(feats.detach(), labels)
    assert int(stats["relation_hit"]) == 0  # both centre tokens have a bit set
    empty = labels.clone()
    empty[:, 3 : 3 + train.N_RELATION] = 0
    _, stats = on.loss(feats.detach(), empty)
    assert int(stats["relation_hit"]) == 2
    with torch.no_grad():  # calls exactly the first token's bit (class 4 left of it) set
        on.proj.weight.zero_()
        on.proj.bias[rel] = -10.0
        on.proj.bias[start + 3] = 10.0
    _, stats = on.loss(feats.detach(), labels)
    # said: that bit on both centre tokens (not on the non-centre ones); right on the first
    assert [int(stats[k]) for k in ("relation_true", "relation_said", "relation_both")] == [3, 2, 1]


def test_the_rank_loss_counts_only_when_weighted() -> None:
    torch.manual_seed(0)
    feats = torch.randn(3, 384, requires_grad=True)
    labels = torch.tensor([[1, 2, 9], [2, 3, 0], [0, 0, 0]])
    bags = torch.zeros(3, train.N_RELATION, dtype=torch.long)
    ranks = torch.tensor([[0, 2], [5, 1], [-1, -1]])
    labels = torch.cat([labels, bags, ranks], dim=1)
    off = train.AuxHead(384, weight=1.0)
    loss_off, stats_off = off.loss(feats, labels)
    assert "rank_hit" not in stats_off
    on = train.AuxHead(384, weight=1.0, rank_weight=0.5)
    loss_on, stats = on.loss(feats, labels)
    # a zero head: each rank costs log 6, averaged over the two tokens that have ranks
    assert torch.allclose(loss_on - loss_off, torch.tensor(0.5 * math.log(train.RANKS)))
    assert (int(stats["ranked"]), int(stats["rank_hit"])) == (2, 0)
    loss_on.backward()  # type: ignore[no-untyped-call]
    grad = on.proj.weight.grad
    width = train.N_RANK * train.RANKS
    assert grad is not None and float(grad[-width:].abs().max()) > 0
    with torch.no_grad():  # calls ranks (0, 2) everywhere: right on the first token only
        on.proj.weight.zero_()
        on.proj.bias[-width:] = 0.0
        on.proj.bias[-width + 0] = 10.0
        on.proj.bias[-width + train.RANKS + 2] = 10.0
    _, stats = on.loss(feats.detach(), labels)
    assert (int(stats["ranked"]), int(stats["rank_hit"])) == (2, 1)


def test_kind_weights_parse_and_steer_the_sampled_types() -> None:
    assert train.parse_kind_weights("count=3,exists=0.5") == {"count": 3.0, "exists": 0.5}
    assert train.parse_kind_weights("spatial=2,spatial:en=6") == {"spatial": 2.0, "spatial:en": 6.0}
    for bad in ("counts=2", "count=-1", "count:fr=2", "counts:en=2"):
        with pytest.raises(argparse.ArgumentTypeError):
            train.parse_kind_weights(bad)
    batches = train.SceneBatches(train.WEIGHTS, 8, 1, kind_weights={"count": 0.0, "total": 20.0})
    kinds = Counter(batches.item(seed).kind for seed in range(200))
    assert kinds["count"] == 0 and kinds["total"] > 100
    by_lang = {"total": 1.0, "total:zh": 0.0, "count": 1.0}
    batches = train.SceneBatches(train.WEIGHTS, 8, 1, ("count", "total"), kind_weights=by_lang)
    pairs = Counter((item.kind, item.lang) for item in map(batches.item, range(300)))
    assert pairs[("total", "zh")] == 0 and pairs[("total", "en")] > 50
    assert pairs[("count", "zh")] > 50 and pairs[("count", "en")] > 50


def test_yes_no_share_steers_the_spatial_form() -> None:
    assert train.parse_args(["--out", "/tmp/x"]).yes_no_share == 0.5
    for bad in ("-0.1", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError):
            train.parse_share(bad)

    answers = {*scenes.TRUE.values(), *scenes.FALSE.values()}

    def yes_no(share: float) -> int:
        batches = train.SceneBatches(train.WEIGHTS, 8, 1, ("spatial",), yes_no_share=share)
        return sum(batches.item(seed).answer in answers for seed in range(300))

    assert yes_no(1.0) == 300 and yes_no(0.0) == 0
    assert 100 < yes_no(0.5) < 200 < yes_no(0.9) < 300


def test_every_share_steers_the_grounding_form() -> None:
    assert train.parse_args(["--out", "/tmp/x"]).every_share == locate.EVERY_SHARE

    def every(share: float) -> int:
        batches = train.SceneBatches(train.WEIGHTS, 8, 1, ("grounding",), every_share=share)
        return sum(batches.item(seed).answer.count('"bbox_2d"') > 1 for seed in range(200))

    assert every(1.0) == 200 and every(0.0) == 0
    assert every(0.4) < every(0.8)


def test_fresh_lm_keeps_the_vision_tower_and_reinitialises_the_language_model() -> None:
    torch.manual_seed(0)
    model = train.build_model(torch.device("cpu"), None)
    with torch.no_grad():  # a "trained" language model: far from any fresh initialisation
        model.model.language_model.embed_tokens.weight.fill_(3.0)
    vision = {k: v.clone() for k, v in model.model.visual.state_dict().items()}

    train.reset_language_model(model)

    for key, value in model.model.visual.state_dict().items():
        assert torch.equal(value, vision[key]), key
    embed = model.model.language_model.embed_tokens.weight
    assert embed.abs().max() < 1.0  # fresh weights, not the 3.0 above
    assert model.lm_head.weight is embed  # the head stays tied to the embeddings


def test_follow_up_share_picks_which_samples_continue() -> None:
    def batches(share: float) -> train.SceneBatches:
        return train.SceneBatches(train.WEIGHTS, 4, seed=0, follow_up_share=share)

    never = [batches(0.0).item(seed) for seed in range(40)]
    always = [batches(1.0).item(seed) for seed in range(40)]
    assert not any(item.follow_ups for item in never)
    assert all(bool(a.follow_ups) == (len(a.scenes) == 1) for a in always)
    assert [a.question for a in always] == [n.question for n in never]  # same first turns
    half = [batches(0.5).item(seed) for seed in range(200)]
    assert 40 < sum(1 for item in half if item.follow_ups) < 110
    three = train.SceneBatches(train.WEIGHTS, 4, seed=0, follow_up_share=1.0, follow_ups=3)
    lengths = {len(three.item(seed).follow_ups) for seed in range(40)}
    assert lengths == {0, 3}  # multi-image samples none, the others three


def test_several_follow_up_turns_are_all_labelled() -> None:
    encode = train.Encoder(train.WEIGHTS, max_pixels=28224)
    tokens = encode.processor.tokenizer
    item = scenes.with_follow_up(scenes.sample(8, kind="count", lang="en"), 3)
    row = encode(item)
    labelled = row["labels"][row["labels"] != train.IGNORE].tolist()
    answers = [item.answer, *(f.answer for f in item.follow_ups)]
    assert labelled == [t for a in answers for t in tokens(a + "<|im_end|>")["input_ids"]]


def one_batch() -> train.Batch:
    dataset = train.SceneBatches(train.WEIGHTS, 4, 1, max_pixels=28224)
    return train.to_device(next(iter(dataset)), torch.device("cpu"))


def test_the_language_model_is_clipped_apart_from_the_vision_tower() -> None:
    """A large auxiliary gradient in the vision tower (the relation bags' loss can be tens of
    times the answer loss) leaves the language model's gradient norm, and so its clipping,
    as it was."""
    batch = one_batch()
    norms = []
    for weight in (1.0, 1000.0):
        torch.manual_seed(0)
        model = train.build_model(torch.device("cpu"), None)
        attention = train.BatchedAttention(model)
        attention.enable(True)
        aux = train.AuxHead(model.config.text_config.hidden_size, weight)
        torch.nn.init.normal_(aux.proj.weight, std=0.05)  # a trained head passes gradient on
        opt = train.make_optimizer(model, 1e-3, 0.05, aux)
        update = train.train_step(model, opt, batch, attention, aux)
        norms.append((float(update.grad_norm), float(update.vision_grad_norm)))
    (lm_1, vision_1), (lm_1000, vision_1000) = norms
    assert lm_1 == pytest.approx(lm_1000, rel=1e-4)
    assert vision_1000 > 50 * vision_1
    vision, rest = train.split_parameters(model)
    assert len(vision) + len(rest) == len(list(model.parameters()))
    assert {id(p) for p in vision}.isdisjoint(id(p) for p in rest)


def test_train_step_updates_or_skips_a_non_finite_gradient_on_the_device() -> None:
    torch.manual_seed(0)
    model = train.build_model(torch.device("cpu"), None)
    attention = train.BatchedAttention(model)
    attention.enable(True)
    aux = train.AuxHead(model.config.text_config.hidden_size, 1.0)
    opt = train.make_optimizer(model, 1e-3, 0.05, aux)
    batch = one_batch()
    before = model.lm_head.weight.detach().clone()
    update = train.train_step(model, opt, batch, attention, aux)
    assert float(update.skipped) == 0.0 and torch.isfinite(update.lm_loss)
    assert not torch.equal(model.lm_head.weight, before)

    with torch.no_grad():
        aux.proj.weight.fill_(float("nan"))  # the head's loss and gradient are NaN
    before = {k: v.clone() for k, v in model.state_dict().items()}
    update = train.train_step(model, opt, batch, attention, aux)
    assert float(update.skipped) == 1.0
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_a_schedule_spread_over_two_runs_continues_where_the_first_ended() -> None:
    peak, warmup = 3e-4, 50
    whole = [train.lr_at(1000, q / 10, peak, 0) for q in range(11)]
    first = [train.lr_at(1000, q / 5, peak, 0, span=(0.0, 0.5)) for q in range(6)]
    second = [train.lr_at(1000, q / 5, peak, 0, span=(0.5, 1.0)) for q in range(6)]
    assert first + second[1:] == pytest.approx(whole)
    assert whole[0] == pytest.approx(peak) and whole[-1] == pytest.approx(0.05 * peak)
    # the warm-up climbs to the schedule's value where the run starts, not to the peak
    assert train.lr_at(warmup - 1, 0.0, peak, warmup, span=(0.5, 1.0)) == pytest.approx(whole[5])
    assert train.lr_at(0, 0.0, peak, warmup, span=(0.5, 1.0)) == pytest.approx(whole[5] / warmup)


def test_the_schedule_clock_starts_when_the_warm_up_ends() -> None:
    """Time spent in the warm-up (compiling) does not count towards the decay: at the end
    of a 100-step warm-up that took 180 of 400 s, the schedule is still at its start; the
    rest of the time decays it fully; the budget ends the run wherever the steps are."""
    steps, budget = 100_000, 400.0
    assert train.run_progress(50, 140.0, steps, budget, None) == pytest.approx(50 / steps)
    assert train.run_progress(100, 180.0, steps, budget, 180.0) == pytest.approx(100 / steps)
    assert train.run_progress(400, 290.0, steps, budget, 180.0) == pytest.approx(0.5)
    assert train.run_progress(700, 400.0, steps, budget, 180.0) == 1.0
    assert train.run_progress(10, 400.0, steps, budget, None) == 1.0  # warm-up never ended
    # no warm-up: the clock runs from the start, as wall time over the budget
    assert train.run_progress(0, 100.0, steps, budget, 0.0) == pytest.approx(0.25)
    assert train.run_progress(steps // 2, 10.0, steps, budget, 0.0) == pytest.approx(0.5)


def test_seed_and_span_arguments_are_checked() -> None:
    args = train.parse_args(["--out", "/tmp/x", "--seed", "12", "--schedule-span", "0.5,1"])
    assert args.seed == 12 and args.schedule_span == (0.5, 1.0)
    assert train.parse_args(["--out", "/tmp/x"]).schedule_span == (0.0, 1.0)
    for bad in ("100", "-1"):  # samples from seed x 10^10 would reach the held-out seeds
        with pytest.raises(argparse.ArgumentTypeError):
            train.parse_seed(bad)
    for bad in ("0.5", "0.5,0.5", "0.6,0.4", "0,1.5", "a,b"):
        with pytest.raises(argparse.ArgumentTypeError):
            train.parse_span(bad)


def test_rope_theta_changes_the_rotations_and_keeps_the_weights(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = train.build_model(torch.device("cpu"), None)
    model.save_pretrained(str(tmp_path))
    moved = train.build_model(torch.device("cpu"), tmp_path, rope_theta=20.0)
    rotary = moved.model.language_model.rotary_emb
    head = moved.config.text_config.hidden_size // moved.config.text_config.num_attention_heads
    assert rotary.inv_freq == pytest.approx(20.0 ** (-torch.arange(0, head, 2) / head))
    assert moved.config.text_config.rope_parameters["rope_theta"] == 20.0
    for key, value in model.state_dict().items():
        assert torch.equal(moved.state_dict()[key], value), key
    # the vision tower's own rope is not the language model's: it stays
    assert moved.config.vision_config.rope_parameters == model.config.vision_config.rope_parameters
    kept = train.build_model(torch.device("cpu"), tmp_path)
    assert kept.config.text_config.rope_parameters["rope_theta"] == modelcfg.TEXT["rope_theta"]


def test_held_out_score_splits_yes_no_questions_by_the_right_answer_and_language(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model that gets every answer right except the English spatial questions answered
    yes scores 0 on "spatial: yes, en", 100 % on "spatial: yes, zh" and on the other keys,
    and in between on "spatial: yes", in the training's evaluation."""
    kinds = ("spatial", "exists")
    held = train.held_out_batches(train.WEIGHTS, 64, 64, kinds, max_pixels=28224)
    batch = train.to_device(held[0], torch.device("cpu"))
    keys = set(batch["yes_no"])
    assert {"spatial: yes", "spatial: no", "exists: yes", "exists: no"} <= keys
    assert keys <= {"", "spatial: yes", "spatial: no", "exists: yes", "exists: no"}
    wrong = [
        key == "spatial: yes" and lang == "en"
        for key, lang in zip(batch["yes_no"], batch["lang"], strict=True)
    ]
    assert 0 < sum(wrong) < batch["yes_no"].count("spatial: yes")

    def right_but_english_spatial_yes(model: object, b: train.Batch, **_: object) -> train.Parts:
        target = b["labels"][:, 1:].clamp(min=0)
        logits = F.one_hot(target, modelcfg.VOCAB_SIZE).float()
        for row, off in enumerate(wrong):
            if off:
                logits[row] = logits[row].roll(1, dims=-1)  # every token one id off
        return train.Parts(torch.cat([logits, logits[:, -1:]], dim=1), None, None)

    monkeypatch.setattr(train, "forward_parts", right_but_english_spatial_yes)
    acc = train.evaluate(torch.nn.Module(), [batch], torch.device("cpu"), None)["acc"]  # type: ignore[arg-type]
    assert acc["spatial: yes, en"] == 0.0
    assert acc["spatial: yes, zh"] == acc["spatial: no, en"] == acc["spatial: no, zh"] == 1.0
    assert 0.0 < acc["spatial: yes"] < 1.0
    assert acc["spatial: no"] == acc["exists: yes"] == acc["exists: no"] == acc["exists"] == 1.0
    assert acc["exists: yes, en"] == acc["exists: no, zh"] == 1.0
    assert acc["all"] == pytest.approx(1 - sum(wrong) / len(wrong), abs=1e-4)


def test_the_tower_freezes_from_its_share_of_the_whole_schedule() -> None:
    torch.manual_seed(0)
    model = train.build_model(torch.device("cpu"), None)
    aux = train.AuxHead(model.config.text_config.hidden_size, 1.0)
    opt = train.make_optimizer(model, 1e-3, 0.05, aux, vision_lr_mult=0.5)
    vision = [g for g in opt.param_groups if g["vision"]]
    rest = [g for g in opt.param_groups if not g["vision"]]
    assert vision and rest
    assert {id(p) for g in vision for p in g["params"]} == {
        *(id(p) for p in model.model.visual.parameters()),
        *(id(p) for p in aux.parameters()),
    }
    for overall, tower in ((0.0, 0.5), (0.69, 0.5), (0.7, 0.0), (1.0, 0.0)):
        assert [train.group_scale(g, overall, 0.7) for g in vision] == [tower] * len(vision)
        assert [train.group_scale(g, overall, 0.7) for g in rest] == [1.0] * len(rest)
    assert train.group_scale(vision[0], 1.0, None) == 0.5  # never frozen by default
    args = train.parse_args(["--out", "/tmp/x", "--freeze-vision-at", "0.7"])
    assert args.freeze_vision_at == 0.7
    with pytest.raises(SystemExit):
        train.parse_args(["--out", "/tmp/x", "--freeze-vision-at", "1.5"])


def test_a_tower_frozen_from_the_start_takes_no_gradient() -> None:
    model = train.build_model(torch.device("cpu"), None)
    train.freeze_tower_from_start(model, 0.5)
    assert all(p.requires_grad for p in model.parameters())
    train.freeze_tower_from_start(model, 0.0)
    tower = {id(p) for p in model.model.visual.parameters()}
    assert tower
    assert all(p.requires_grad == (id(p) not in tower) for p in model.parameters())


def test_a_run_with_the_tower_frozen_from_the_start_keeps_it(tmp_path: Path) -> None:
    """The whole loop on the CPU, three steps: the saved tower is the initial one, the
    language model moved, and the log's clock is the run's."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    torch.manual_seed(0)
    train.build_model(torch.device("cpu"), None).save_pretrained(str(tmp_path / "init"))
    out = tmp_path / "run"
    train.main(
        [
            *("--out", str(out), "--init", str(tmp_path / "init"), "--device", "cpu"),
            *("--steps", "3", "--batch", "2", "--workers", "1", "--eval-n", "4"),
            *("--lr", "1e-2", "--warmup", "1"),
            *("--max-pixels", "28224", "--log-every", "1", "--freeze-vision-at", "0"),
            *("--name-weight", "1", "--pair-weight", "1", "--kinds", "spatial"),
            *("--answer-weight", "1", "--answer-kinds", "spatial", "--follow-ups", "2"),
        ]
    )
    before = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(tmp_path / "init"))
    after = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(out / "model"))
    saved = dict(after.named_parameters())
    moved = {  # the checkpoint is bf16: compare at that precision
        name: not torch.equal(param.bfloat16(), saved[name].bfloat16())
        for name, param in before.named_parameters()
    }
    tower = [m for name, m in moved.items() if name.startswith("model.visual.")]
    rest = [m for name, m in moved.items() if not name.startswith("model.visual.")]
    assert tower and not any(tower)
    assert sum(rest) >= 0.9 * len(rest), sum(rest)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r["train"] for r in rows if "train" in r]
    assert [s["step"] for s in steps] == [0, 1, 2]
    assert all(0.0 <= s["elapsed_s"] < 600 for s in steps)
    assert any("eval" in r and "pair_labels" in r["eval"] for r in rows)
    assert any("eval" in r and "answer_labels" in r["eval"] for r in rows)


def loop_args(out: Path, *extra: str) -> list[str]:
    """train.py's options for a few CPU steps of the whole loop, every head on."""
    return [
        *("--out", str(out), "--device", "cpu", "--batch", "2", "--workers", "1"),
        *("--eval-n", "4", "--warmup", "1", "--max-pixels", "28224", "--log-every", "1"),
        *("--name-weight", "1", "--pair-weight", "1", "--kinds", "spatial"),
        *extra,
    ]


# dynamo reads ``.grad`` of non-leaf tensors while tracing (its own warning, hidden outside
# pytest's warnings-as-errors)
COMPILE_WARNING = "ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning"


@pytest.mark.filterwarnings(COMPILE_WARNING)
def test_a_compiled_run_saves_its_heads_and_a_next_call_takes_them_back(tmp_path: Path) -> None:
    """From scratch with ``--compile``: the saved heads are trained (not their zero start);
    a continuing call at learning rate 0 loads them and saves them unchanged."""
    first, second = tmp_path / "first", tmp_path / "second"
    train.main(loop_args(first, "--steps", "2", "--lr", "1e-2", "--compile"))
    saved = torch.load(first / train.HEADS_FILE, weights_only=True)
    assert {t.dtype for state in saved.values() for t in state.values()} == {torch.bfloat16}
    assert set(saved) == {"aux", "name_labels", "pair_labels"}
    assert all(t.abs().sum() > 0 for t in saved["aux"].values())
    init = ("--init", str(first / "model"), "--init-heads", str(first / train.HEADS_FILE))
    train.main(loop_args(second, "--steps", "1", "--lr", "0", *init))
    again = torch.load(second / train.HEADS_FILE, weights_only=True)
    for key, state in saved.items():
        for name, tensor in state.items():
            assert torch.equal(again[key][name], tensor), (key, name)


@pytest.mark.filterwarnings(COMPILE_WARNING)
def test_compiled_parts_train_as_the_eager_model_does() -> None:
    """Two training steps from one fresh model, eager and with ``compile_parts``: the same
    losses (fp32 on the CPU)."""
    args = train.parse_args(loop_args(Path("/tmp/unused"), "--rank-weight", "2"))
    dataset = train.SceneBatches(
        args.processor_dir, 2, 3, ("spatial", "count"), 28224, 0.5, {}, 0.5
    )
    cpu = torch.device("cpu")
    batches = [train.to_device(b, cpu) for b in itertools.islice(iter(dataset), 2)]
    losses = []
    for compiled in (False, True):
        torch.manual_seed(0)
        model = train.build_model(cpu)
        attention = train.BatchedAttention(model)
        attention.enable(True)
        aux = train.AuxHead(modelcfg.TEXT["hidden_size"], 1.0, 1.0, 2.0)
        heads = train.language_heads(args, modelcfg.TEXT["hidden_size"], cpu)
        if compiled:
            train.compile_parts(model)
        opt = train.make_optimizer(model, 1e-3, 0.05, aux, 1.0, heads)
        steps = [train.train_step(model, opt, b, attention, aux, heads) for b in batches]
        losses.append([float(v) for s in steps for v in (s.lm_loss, s.aux_loss, s.name_loss)])
    assert losses[1] == pytest.approx(losses[0], rel=1e-4, abs=1e-5)


def test_the_loop_trains_grounding_and_refusals_from_the_shipped_weights(tmp_path: Path) -> None:
    """Two CPU steps continuing from the shipped weights on the new kinds beside a
    grammar one, every head on: their answers are labelled, held-out scores name them,
    and the language model moves."""
    out = tmp_path / "run"
    shipped = weights_dir("bf16")
    train.main(
        [
            *loop_args(out, "--steps", "2", "--lr", "1e-3", "--init", str(shipped)),
            *("--kinds", "grounding,off_grammar,count", "--eval-n", "6"),
            *("--kind-weights", "grounding=3,off_grammar=2", "--answer-weight", "1"),
            *("--referent-weight", "1", "--asked-weight", "1", "--follow-ups", "2"),
        ]
    )
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r["eval"] for r in rows if "eval" in r]
    assert {"grounding", "off_grammar", "count"} <= set(evals[-1]["acc"])
    assert all(math.isfinite(r["train"]["loss"]) for r in rows if "train" in r)
    assert (out / "model" / "model.safetensors.index.json").exists() or any(
        (out / "model").glob("*.safetensors")
    )


def test_the_training_code_imports_without_the_apps_dependencies() -> None:
    """The device has torch and transformers only: train.py (and what it imports) must
    not reach the app's settings (pydantic) or web stack."""
    import subprocess
    import sys

    blocked = "import sys\nfor m in ('pydantic', 'pydantic_settings', 'fastapi', 'gradio'):"
    code = f"{blocked}\n    sys.modules[m] = None\nimport training.train, training.names"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_training_path_uses_the_engines_vision_attention_and_matches_the_stock_model() -> None:
    """The training forward (the engine's batched vision attention with the layouts the
    data workers built, mrope positions precomputed) gives the stock model's logits and the
    same vision-tower gradient; the blocks look the batch's layouts up, not rebuild them."""
    torch.manual_seed(0)
    model = train.build_model(torch.device("cpu"), train.WEIGHTS)
    encode = train.Encoder(train.WEIGHTS, max_pixels=28224)
    items = [scenes.sample(s, k, "en") for s, k in enumerate(("multi_count", "count", "spatial"))]
    batch = train.to_device(train.collate([encode(i) for i in items]), torch.device("cpu"))
    attention = train.BatchedAttention(model)
    diff = train.check_equivalence(model, batch, attention)
    assert diff["max_abs_diff"] < 1e-4 * diff["logit_scale"]
    for cu, layout in zip(
        (batch["vision"]["cu_seqlens"], batch["vision"]["cu_window_seqlens"]),
        batch["layouts"],
        strict=True,
    ):
        assert attention.layouts.get(cu) is layout

    def tower_grad() -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        train.forward_logits(model, batch, attention=attention).sum().backward()
        return torch.cat([p.grad.flatten() for p in model.model.visual.parameters()])

    attention.enable(True)
    assert all("forward" in block.attn.__dict__ for block in model.model.visual.blocks)
    batched = tower_grad()
    attention.enable(False)
    stock = tower_grad()
    assert torch.allclose(batched, stock, atol=1e-4 * float(stock.abs().max()))
