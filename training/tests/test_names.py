"""The name head's labels and loss (training/names.py)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from qwen_ui.demo import modelcfg, scenes
from training import names, train


def spatial(lang: scenes.Lang, yes_no_share: float, n: int) -> list[scenes.Sample]:
    return [scenes.sample(seed, "spatial", lang, yes_no_share=yes_no_share) for seed in range(n)]


def ranks_of(item: scenes.Sample, shape: scenes.Shape) -> list[int]:
    scene = item.scenes[0]
    return list(scenes.shape_ranks(scene)[scene.shapes.index(shape)])


@pytest.mark.parametrize("lang", scenes.LANGS)
def test_each_named_shape_is_labelled_at_the_last_token_of_its_name(lang: scenes.Lang) -> None:
    encode = train.Encoder(train.WEIGHTS)
    tokens = encode.processor.tokenizer
    for item in spatial(lang, 0.5, 12):
        row = encode(item)
        ids = row["input_ids"].tolist()
        question_start = ids.index(modelcfg.VISION_END_ID) + 1  # one image: the question next
        named = names.named_shapes(item)
        assert len(row["name_labels"]) == len(named) >= 1
        for (position, *ranks), (_, shape) in zip(row["name_labels"].tolist(), named, strict=True):
            name = scenes.shape_name(shape, lang)
            upto = tokens.decode(ids[question_start : position + 1])
            assert name in upto, (item.question, upto)
            assert name not in tokens.decode(ids[question_start:position])
            assert ranks == ranks_of(item, shape)


def test_yes_no_questions_name_two_shapes_in_order_and_which_questions_one() -> None:
    for lang in scenes.LANGS:
        for item in spatial(lang, 1.0, 8):
            (end_a, a), (end_b, b) = names.named_shapes(item)
            assert end_a < end_b and a is not b
            scene = item.scenes[0]
            assert scene.count(a.colour, a.kind) == scene.count(b.colour, b.kind) == 1
        for item in spatial(lang, 0.0, 8):
            ((_, ref),) = names.named_shapes(item)
            assert scenes.shape_name(ref, lang) in item.question
    for kind in ("count", "colour", "exists", "multi_compare"):
        assert names.named_shapes(scenes.sample(1, kind, "en")) == []


@pytest.mark.parametrize("lang", scenes.LANGS)
def test_colour_and_shape_questions_name_the_shape_their_answer_is_about(
    lang: scenes.Lang,
) -> None:
    """The referent of "What colour is the star?" is the one star, whose colour is the
    answer; of "What shape is the red one?" the one red shape, whose kind is the answer.
    Labelled only when the name head is asked for those types, at the token holding the
    end of the word that names it."""
    encode = train.Encoder(train.WEIGHTS, 28224, names.Labelling(name_kinds=names.NAMING_KINDS))
    plain = train.Encoder(train.WEIGHTS, max_pixels=28224)
    tokens = encode.processor.tokenizer
    for kind in ("colour", "shape"):
        for seed in range(12):
            item = scenes.sample(seed, kind, lang)
            ((end, shape),) = names.referents(item)
            said = shape.colour if kind == "colour" else shape.kind
            if lang == "zh":
                said = (scenes.COLOUR_ZH | scenes.SHAPE_ZH)[said]
            assert said == item.answer
            row = encode(item)
            ((position, *ranks),) = row["name_labels"].tolist()
            ids = row["input_ids"].tolist()
            start = ids.index(modelcfg.VISION_END_ID) + 1
            word = item.question[:end]
            assert tokens.decode(ids[start : position + 1]).startswith(word)
            assert not tokens.decode(ids[start:position]).startswith(word)
            assert ranks == ranks_of(item, shape)
            assert len(plain(item)["name_labels"]) == 0
    assert names.referents(scenes.sample(1, "count", lang)) == []


def test_the_batch_keeps_each_name_with_its_row() -> None:
    encode = train.Encoder(train.WEIGHTS, max_pixels=28224)
    items = [scenes.sample(3, "count", "en"), *spatial("zh", 1.0, 2)]
    rows = [encode(i) for i in items]
    batch = train.collate(rows)
    assert batch["name_labels"].tolist() == [
        [i, *label] for i, r in enumerate(rows) for label in r["name_labels"].tolist()
    ]
    assert batch["name_labels"][:, 0].tolist() == [1, 1, 2, 2]


def test_name_head_loss_starts_at_chance_and_counts_right_names() -> None:
    head = names.NameHead(8, weight=2.0, layer=1)
    hidden = torch.randn(2, 5, 8, requires_grad=True)
    labels = torch.tensor([[0, 1, 0, 3], [1, 4, 5, 2]])
    loss, stats = head.loss(hidden, labels)
    assert float(loss.detach()) == pytest.approx(2.0 * math.log(scenes.MAX_SHAPES))
    assert int(stats["names"]) == 2
    with torch.no_grad():  # a head that reads rank across 0 / down 3 from feature 0
        head.proj.bias[[0, scenes.MAX_SHAPES + 3]] = 10.0
    _, stats = head.loss(hidden, labels)
    assert int(stats["name_hit"]) == 1
    torch.nn.init.normal_(head.proj.weight)  # zero weights pass no gradient on
    head.loss(hidden, labels)[0].backward()  # type: ignore[no-untyped-call]
    assert hidden.grad is not None
    assert hidden.grad[0, 1].abs().sum() > 0 and hidden.grad[0, 0].abs().sum() == 0


def test_a_batch_without_names_adds_nothing() -> None:
    head = names.NameHead(8, weight=1.0, layer=1)
    loss, stats = head.loss(torch.randn(2, 5, 8), torch.zeros((0, 4), dtype=torch.long))
    assert float(loss.detach()) == 0.0 and int(stats["names"]) == 0
    loss.backward()  # type: ignore[no-untyped-call]  # still part of the graph


def test_train_step_trains_the_language_model_through_the_name_head() -> None:
    """The head's loss reaches the language model's layers up to its own, not beyond."""
    dataset = train.SceneBatches(train.WEIGHTS, 4, 1, ("spatial",), max_pixels=28224)
    batch = train.to_device(next(iter(dataset)), torch.device("cpu"))
    assert len(batch["name_labels"]) >= 4
    torch.manual_seed(0)
    model = train.build_model(torch.device("cpu"), None)
    attention = train.BatchedAttention(model)
    attention.enable(True)
    hidden = model.config.text_config.hidden_size
    aux = train.AuxHead(hidden, 0.0)
    head = names.NameHead(hidden, 1.0, layer=1)
    torch.nn.init.normal_(head.proj.weight, std=0.5)
    grads = {}
    for weight in (0.0, 1.0):
        head.weight = weight
        heads = (("name_labels", head),)
        opt = train.make_optimizer(model, 0.0, 0.0, aux, heads=heads)
        update = train.train_step(model, opt, batch, attention, aux, heads)
        layers = model.model.language_model.layers
        grads[weight] = [
            p.grad.clone() for p in (layers[0].mlp.down_proj.weight, layers[1].mlp.down_proj.weight)
        ]
        assert (float(update.name_loss) > 0) == (weight > 0)
    # clipping rescales the whole language model's gradient: compare directions
    first, second = (
        float(F.cosine_similarity(grads[0.0][i].flatten(), grads[1.0][i].flatten(), dim=0))
        for i in (0, 1)
    )
    assert first < 0.9, first  # layer 1 feeds the head
    assert second == pytest.approx(1.0, abs=1e-4)  # layer 2 comes after it
    result = train.evaluate(model, [batch], torch.device("cpu"), attention, aux, heads)
    assert 0.0 <= result["name_labels"] <= 1.0


def test_the_pair_head_reads_both_ranks_where_a_yes_no_answer_is_given() -> None:
    encode = train.Encoder(train.WEIGHTS, max_pixels=28224)
    for lang in scenes.LANGS:
        for item in spatial(lang, 1.0, 6):
            row = encode(item)
            ((position, *ranks),) = row["pair_labels"].tolist()
            assert row["labels"][position] == train.IGNORE
            assert row["labels"][position + 1] != train.IGNORE  # the answer's first token
            assert ranks == [r for label in row["name_labels"].tolist() for r in label[1:]]
        for item in spatial(lang, 0.0, 3):  # the "which" form names one shape
            assert encode(item)["pair_labels"].shape == (0, 5)
    head = names.NameHead(8, weight=1.0, layer=4, outputs=2 * names.N_AXES)
    loss, stats = head.loss(torch.randn(1, 3, 8), torch.tensor([[0, 2, 0, 1, 4, 5]]))
    assert float(loss.detach()) == pytest.approx(math.log(scenes.MAX_SHAPES))
    assert int(stats["names"]) == 1 and int(stats["name_hit"]) == 0


def test_the_referent_head_reads_the_named_shapes_kind_and_colour_where_it_is_answered() -> None:
    """At the position giving a colour or shape answer: the referent's (kind, colour)
    class, whose colour (a colour question) or kind (a shape question) is the answer."""
    encode = train.Encoder(train.WEIGHTS, max_pixels=28224)
    tokens = encode.processor.tokenizer
    by_class = [(k, c) for k in scenes.SHAPES for c in scenes.COLOURS]
    for lang in scenes.LANGS:
        for kind in ("colour", "shape"):
            for seed in range(6):
                item = scenes.sample(seed, kind, lang)
                row = encode(item)
                ((position, joint),) = row["referent_labels"].tolist()
                assert row["labels"][position] == train.IGNORE
                first = int(row["labels"][position + 1])  # the answer's first token
                shape, colour = by_class[joint]
                said = colour if kind == "colour" else shape
                said = said if lang == "en" else (scenes.COLOUR_ZH | scenes.SHAPE_ZH)[said]
                assert said == item.answer
                assert tokens.decode([first]) == tokens.decode(tokens(said)["input_ids"][:1])
        for other in ("count", "spatial", "exists", "multi_count"):
            assert encode(scenes.sample(2, other, lang))["referent_labels"].shape == (0, 2)
    head = names.NameHead(8, 1.0, 3, outputs=1, classes=scenes.JOINT_CLASSES)
    loss, stats = head.loss(torch.randn(2, 3, 8), torch.tensor([[1, 2, 17]]))
    assert float(loss.detach()) == pytest.approx(math.log(scenes.JOINT_CLASSES))
    assert int(stats["names"]) == 1 and int(stats["name_hit"]) == 0


def test_the_asked_head_reads_the_relation_a_spatial_question_asks_where_it_is_answered() -> None:
    """At the position giving a spatial answer (either form, first turn or follow-up): the
    relation the question's words ask, the same class in both languages."""
    encode = train.Encoder(train.WEIGHTS, max_pixels=28224)
    seen: dict[tuple[str, str], int] = {}
    for lang in scenes.LANGS:
        words = scenes.REL_EN if lang == "en" else scenes.REL_ZH
        for share in (0.0, 1.0):
            for seed in range(8):
                item = scenes.sample(seed, "spatial", lang, yes_no_share=share)
                ((position, relation),) = encode(item)["asked_labels"].tolist()
                assert encode(item)["labels"][position] == train.IGNORE
                assert words[scenes.RELATIONS[relation]] in item.question
                assert sum(w in item.question for w in words.values()) == 1
                key = (lang, scenes.RELATIONS[relation])
                seen[key] = seen.get(key, 0) + 1
        for other in ("count", "colour", "exists", "multi_compare"):
            assert encode(scenes.sample(3, other, lang))["asked_labels"].shape == (0, 2)
    assert len(seen) >= 6  # most relations in both languages
    follow_ups = 0
    for seed in range(40):  # a yes/no spatial follow-up is labelled at its own answer
        item = scenes.with_follow_up(scenes.sample(seed, "count", "zh"), 3)
        later = [t for t in scenes.turns_of(item)[1:] if t.kind == "spatial"]
        rows = encode(item)["asked_labels"].tolist()
        assert [r for _, r in rows] == [
            scenes.RELATIONS.index(str(names.relation_asked(t))) for t in later
        ]
        follow_ups += len(later)
    assert follow_ups > 5


def test_the_asked_head_is_built_under_its_key_with_one_class_per_relation() -> None:
    args = train.parse_args(["--out", "/tmp/x", "--asked-weight", "2"])
    ((key, head),) = train.language_heads(args, 16, torch.device("cpu"))
    assert key == "asked_labels" and head.layer == 4 and head.weight == 2.0
    assert head.proj.out_features == len(scenes.RELATIONS)
    assert names.relation_asked(scenes.sample(0, "count", "en")) is None


def test_the_referent_head_is_built_saved_and_scored_under_its_key() -> None:
    args = train.parse_args(["--out", "/tmp/x", "--referent-weight", "0.5"])
    ((key, head),) = train.language_heads(args, 16, torch.device("cpu"))
    assert key == "referent_labels" and head.layer == 3 and head.weight == 0.5
    assert head.proj.out_features == scenes.JOINT_CLASSES
    batch = train.collate(
        [
            train.Encoder(train.WEIGHTS, max_pixels=28224)(scenes.sample(s, "shape", "en"))
            for s in range(3)
        ]
    )
    assert batch[key][:, 0].tolist() == [0, 1, 2]  # each row's label keeps its row


def test_the_answer_head_reads_each_answers_first_token_where_it_is_given() -> None:
    """Every turn (first or follow-up) whose question is of an answer kind (count and
    existence by default): the position before its answer and the answer's first token."""
    encode = train.Encoder(train.WEIGHTS, max_pixels=28224)
    tokens = encode.processor.tokenizer
    seen = 0
    for lang in scenes.LANGS:
        for kind in ("count", "exists", "colour", "spatial"):
            for seed in range(4):
                item = scenes.with_follow_up(scenes.sample(seed, kind, lang), 3)
                row = encode(item)
                answers = [t.answer for t in scenes.turns_of(item) if t.kind in names.ANSWER_KINDS]
                rows = row["answer_labels"].tolist()
                assert [tokens.decode([t]) for _, t in rows] == [
                    tokens.decode(tokens(a)["input_ids"][:1]) for a in answers
                ]
                for position, token in rows:
                    assert row["labels"][position] == train.IGNORE
                    assert int(row["labels"][position + 1]) == token
                seen += len(rows)
    assert seen > 40
    chosen = train.Encoder(train.WEIGHTS, 28224, names.Labelling(answer_kinds=("spatial",)))
    assert chosen(scenes.sample(4, "spatial", "en"))["answer_labels"].shape == (1, 2)


def test_follow_up_turns_are_labelled_as_questions_of_their_own_types() -> None:
    """A yes/no spatial follow-up gets pair labels at its own answer, a colour or shape
    follow-up referent labels, and its names name labels, as a first turn of that type
    would."""
    encode = train.Encoder(train.WEIGHTS, 28224, names.Labelling(name_kinds=names.NAMING_KINDS))
    found = {"spatial": 0, "colour": 0, "shape": 0}
    for seed in range(60):
        item = scenes.with_follow_up(scenes.sample(seed, "total", "en"), 3)
        row = encode(item)
        later = scenes.turns_of(item)[1:]
        spatial = [t for t in later if t.kind == "spatial"]
        referring = [t for t in later if t.kind in names.SINGLE_NAME_KINDS]
        assert len(row["pair_labels"]) == len(spatial)
        assert len(row["referent_labels"]) == len(referring)
        assert len(row["name_labels"]) == 2 * len(spatial) + len(referring)
        for position, *_ in row["pair_labels"].tolist() + row["referent_labels"].tolist():
            assert row["labels"][position] == train.IGNORE != row["labels"][position + 1]
        for turn in later:
            found[turn.kind] = found.get(turn.kind, 0) + 1
        pairs = [names.pair_labels(t, 0)[0, 1:].tolist() for t in spatial]
        assert [r[1:] for r in row["pair_labels"].tolist()] == pairs
        ids, text = row["input_ids"].tolist(), encode.processor.tokenizer.decode
        for position, *_ in row["name_labels"].tolist():  # ends a name in a later question
            asked = text(ids[: position + 1]).rsplit("<|im_start|>user\n", 1)[1]
            assert any(q.startswith(asked) for q in (t.question for t in later)), asked
            assert asked.split()[-1] in (*scenes.SHAPES, *scenes.COLOURS), asked
    assert min(found.values()) > 10


def test_the_answer_head_is_built_on_the_vocabulary_and_its_kinds_are_checked() -> None:
    args = train.parse_args(
        ["--out", "/tmp/x", "--answer-weight", "0.5", "--answer-kinds", "count"]
    )
    ((key, head),) = train.language_heads(args, 16, torch.device("cpu"))
    assert key == "answer_labels" and head.layer == 3 and head.weight == 0.5
    assert head.proj.out_features == modelcfg.VOCAB_SIZE and args.answer_kinds == ("count",)
    loss, stats = head.loss(torch.randn(2, 3, 16), torch.tensor([[0, 1, 17], [1, 2, 5]]))
    assert float(loss.detach()) == pytest.approx(0.5 * math.log(modelcfg.VOCAB_SIZE))
    assert int(stats["names"]) == 2
    with pytest.raises(SystemExit):
        train.parse_args(["--out", "/tmp/x", "--answer-kinds", "count,weather"])
