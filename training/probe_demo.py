"""Probes of a demo checkpoint on the CPU: where the spatial yes/no answer is computed.

    .venv/bin/python -m training.probe_demo ranks  [--weights DIR] [--scenes 1500]
    .venv/bin/python -m training.probe_demo answer [--weights DIR] [--n 1200] [--lang both]
    .venv/bin/python -m training.probe_demo attention [--weights DIR] [--n 400] [--lang en]
    .venv/bin/python -m training.probe_demo errors [--weights DIR] [--n 1200]
    .venv/bin/python -m training.probe_demo shape  [--weights DIR] [--n 1200]
    .venv/bin/python -m training.probe_demo heads  --weights DIR --heads DIR/heads.pt [--n 800]
    .venv/bin/python -m training.probe_demo relation [--weights DIR] [--n 1200]
    .venv/bin/python -m training.probe_demo mixture --train-options "..." [--n 6000] [--seed S]

``ranks``: a linear probe (80/20 split) of the vision tower's merged tokens for the ranks
across and down (``train.rank_labels``) of the shape covering each token, on English
spatial samples of training seeds 10^11 on (no run has drawn them: run seeds stop at 99,
samples at seed x 10^10 + a few million).
``answer``: per language-model layer, a linear probe (70/30 split) of the right answer
from the hidden state at the answer position, over the spatial yes/no questions among
the first ``--n`` spatial questions of held-out set 7 (of one language, or ``--lang
both``); and the model's own accuracy.
``attention``: per (position before the answer, layer, head), the attention mass on the
tokens covered by the two named shapes, A (named first) and B, over the yes/no
questions of one language; the 25 largest.
``errors``: the model's accuracy on the spatial yes/no questions among the first ``--n``
spatial questions of set 7, split by one property of the question at a time (the right
answer, language, relation, shape count, look-alikes of A or B, the gap between them).
``shape``: the model's first answer token on the first ``--n`` shape questions of set 7
("What shape is the red one?"), right per language and by how many kinds of shape the
scene holds; of the wrong answers, how many name a kind in the scene and how many one of
its most common kinds.
``heads``: a run's saved name and pair heads on the yes/no spatial questions among the
first ``--n`` spatial questions of set 7, per language.
``relation``: per language-model layer, at the answer position of the spatial yes/no
questions among the first ``--n`` of set 7, linear probes of the relation asked and of
the right answer: fitted on 70 % of one language's and scored on the rest of it, and
fitted on all of one language's and scored on the other's (is it the same code in both?).
``mixture``: the turns (first questions and follow-ups) of the first ``--n`` training
samples that ``train.py`` with ``--train-options`` and ``--seed`` draws, by type,
language, yes/no answer and place; no model.
Figures from these are in training/NOTES.md ("Eleventh session" to "Thirteenth session").
"""

from __future__ import annotations

import argparse
import logging
import shlex
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

from qwen_ui.demo import modelcfg, scenes
from training import names, train

log = logging.getLogger("probe_demo")
YES_NO = ("yes", "no", "是", "否")


def load(weights: Path, attentions: bool = False) -> Any:
    from transformers import Qwen2_5_VLForConditionalGeneration

    kw = {"attn_implementation": "eager"} if attentions else {}
    return Qwen2_5_VLForConditionalGeneration.from_pretrained(
        str(weights), dtype=torch.float32, **kw
    ).eval()


def prompt_inputs(encode: train.Encoder, item: scenes.Sample) -> tuple[dict[str, Any], Any]:
    """The model's inputs up to the answer (the prompt), and the encoded row."""
    row = encode(item)
    first = int((row["labels"] != train.IGNORE).nonzero()[0])
    batch = train.to_device(train.collate([row]), torch.device("cpu"))
    keys = ("input_ids", "attention_mask", "mm_token_type_ids")
    inputs = {k: batch[k][:, :first] for k in keys}
    inputs |= {k: batch[k] for k in ("pixel_values", "image_grid_thw")}
    return inputs, row


def linear_probe(x: torch.Tensor, y: torch.Tensor, classes: int, train_share: float) -> float:
    """Test accuracy of a logistic regression from ``x`` to ``y`` (a seeded split)."""
    generator = torch.Generator().manual_seed(0)
    order = torch.randperm(len(x), generator=generator)
    cut = int(len(x) * train_share)
    fit, test = order[:cut], order[cut:]
    return float(fitted_probe(x[fit], y[fit], classes)(x[test], y[test]))


def fitted_probe(x: torch.Tensor, y: torch.Tensor, classes: int) -> Any:
    """A logistic regression from ``x`` to ``y``, fitted on all of them: a function that
    scores other (x, y)."""
    mean, std = x.mean(0), x.std(0) + 1e-5
    head = torch.nn.Linear(x.shape[1], classes)
    opt = torch.optim.Adam(head.parameters(), 1e-2, weight_decay=1e-3)
    for _ in range(300):
        opt.zero_grad()
        F.cross_entropy(head((x - mean) / std), y).backward()  # type: ignore[no-untyped-call]
        opt.step()

    def score(x2: torch.Tensor, y2: torch.Tensor) -> float:
        with torch.no_grad():
            return float((head((x2 - mean) / std).argmax(1) == y2).float().mean())

    return score


def probe_ranks(args: argparse.Namespace) -> None:
    model, encode = load(args.weights), train.Encoder(train.WEIGHTS)
    feats, ranks = [], []
    for i in range(args.scenes):
        item = scenes.sample(10**11 + i, "spatial", "en")
        inputs, row = prompt_inputs(encode, item)
        with torch.no_grad():
            out = model.model.visual(inputs["pixel_values"], grid_thw=inputs["image_grid_thw"])
        labels = row["vision_labels"][:, 3 + train.N_RELATION :]
        covered = labels[:, 0] >= 0
        feats.append(out.pooler_output[covered])
        ranks.append(labels[covered])
    x, y = torch.cat(feats), torch.cat(ranks)
    for axis, name in enumerate(("across", "down")):
        accuracy = linear_probe(x, y[:, axis], train.RANKS, 0.8)
        log.info("rank %s: probe accuracy %.3f on %d covered tokens", name, accuracy, len(x))


class YesNo(NamedTuple):
    """The model, the encoder, the token ids of yes and no (both languages) and the yes/no
    questions among the first ``--n`` spatial questions of set 7."""

    model: Any
    encode: train.Encoder
    yes: list[int]
    no: list[int]
    items: list[scenes.Sample]


def yes_no_questions(args: argparse.Namespace) -> YesNo:
    encode = train.Encoder(train.WEIGHTS)
    tokens = encode.processor.tokenizer
    yes = [tokens(w)["input_ids"][0] for w in ("yes", "是")]
    no = [tokens(w)["input_ids"][0] for w in ("no", "否")]
    items = [s for s in scenes.held_out(args.n, 7, ("spatial",)) if s.answer in YES_NO]
    if args.lang not in (None, "both"):  # answer: both languages unless one is asked for
        items = [s for s in items if s.lang == args.lang]
    return YesNo(load(args.weights), encode, yes, no, items)


def at_answer(model: Any, encode: train.Encoder, item: scenes.Sample) -> tuple[Any, Any]:
    """Every layer's hidden state (``[layers + 1, width]``) and the logits at the position
    that gives ``item``'s answer."""
    inputs, _ = prompt_inputs(encode, item)
    with torch.no_grad():
        out = model(**inputs, output_hidden_states=True, use_cache=False)
    return torch.stack([h[0, -1] for h in out.hidden_states]), out.logits[0, -1]


def says_yes(item: scenes.Sample) -> int:
    """1 where the right answer to a yes/no spatial question is yes."""
    return int(item.answer in scenes.TRUE.values())


def probe_answer(args: argparse.Namespace) -> None:
    model, encode, yes, no, items = yes_no_questions(args)
    states, truth, right = [], [], []
    for item in items:
        state, logits = at_answer(model, encode, item)
        states.append(state)
        said_yes = bool(logits[yes].max() > logits[no].max())
        truth.append(says_yes(item))
        right.append(said_yes == bool(truth[-1]))
    x, y = torch.stack(states), torch.tensor(truth)
    log.info("%d yes/no questions, the model right on %.3f", len(y), sum(right) / len(y))
    for layer in range(x.shape[1]):
        accuracy = linear_probe(x[:, layer], y, 2, 0.7)
        where = f"after layer {layer}" if layer else "from the embeddings"
        log.info("%s: the right answer probed at %.3f", where, accuracy)


def answer_states(
    args: argparse.Namespace,
) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Per language: the hidden states at the answer position (``[n, layers + 1, width]``),
    the relation each question asks and its right answer (1: yes)."""
    model, encode, _, _, items = yes_no_questions(args)
    found: dict[str, tuple[list[torch.Tensor], list[int], list[int]]] = {
        lang: ([], [], []) for lang in scenes.LANGS
    }
    for item in items:
        states, relations, truth = found[item.lang]
        states.append(at_answer(model, encode, item)[0])
        relations.append(scenes.RELATIONS.index(relation_of(item)))
        truth.append(says_yes(item))
    return {
        lang: (torch.stack(x), torch.tensor(r), torch.tensor(t))
        for lang, (x, r, t) in found.items()
    }


def probe_relation(args: argparse.Namespace) -> None:
    by_lang = answer_states(args)
    layers = by_lang["en"][0].shape[1]
    for what, column, classes in (("relation", 1, len(scenes.RELATIONS)), ("answer", 2, 2)):
        for layer in range(layers):
            scores = []
            for lang, other in (("en", "zh"), ("zh", "en")):
                x, y = by_lang[lang][0][:, layer], by_lang[lang][column]
                ox, oy = by_lang[other][0][:, layer], by_lang[other][column]
                within = linear_probe(x, y, classes, 0.7)
                across = fitted_probe(x, y, classes)(ox, oy)
                scores.append(f"{lang} {within:.3f}, {lang} to {other} {across:.3f}")
            log.info("%s after layer %d: %s", what, layer, "; ".join(scores))


YES_NO_WORDS = {
    *scenes.YES.values(),
    *scenes.NO.values(),
    *scenes.TRUE.values(),
    *scenes.FALSE.values(),
}


def probe_mixture(args: argparse.Namespace) -> None:
    options = ["--out", "unused", "--seed", str(args.seed), *shlex.split(args.train_options)]
    data = train.scene_batches(train.parse_args(options))
    tally: Counter[tuple[str, str, str, str]] = Counter()
    for i in range(args.n):
        for at, turn in enumerate(scenes.turns_of(data.nth(i))):
            answer = turn.answer if turn.answer in YES_NO_WORDS else "-"
            tally[(turn.kind, turn.lang, answer, "follow-up" if at else "first")] += 1
    total = sum(tally.values())
    log.info("%d turns in %d samples", total, args.n)
    for key, n in sorted(tally.items(), key=lambda kv: -kv[1]):
        log.info("%-40s %6d  %5.2f %%", ", ".join(key), n, 100 * n / total)


def named_shapes(item: scenes.Sample) -> tuple[scenes.Shape, scenes.Shape]:
    """A and B of a yes/no spatial question, in the order the question names them."""
    (_, a), (_, b) = names.named_shapes(item)
    return a, b


def covered_tokens(labels: torch.Tensor, shape: scenes.Shape, offset: int) -> list[int]:
    kind = 1 + scenes.SHAPES.index(shape.kind)
    colour = 1 + list(scenes.COLOURS).index(shape.colour)
    mask = (labels[:, 0] == kind) & (labels[:, 1] == colour)
    return (mask.nonzero()[:, 0] + offset).tolist()


def probe_attention(args: argparse.Namespace) -> None:
    model, encode = load(args.weights, attentions=True), train.Encoder(train.WEIGHTS)
    lang = args.lang or "en"
    items = [
        s
        for s in scenes.held_out(args.n, 7, ("spatial",))
        if lang in (s.lang, "both") and s.answer in YES_NO
    ]
    mass: dict[tuple[int, int, int], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for item in items:
        inputs, row = prompt_inputs(encode, item)
        with torch.no_grad():
            out = model(**inputs, output_attentions=True, use_cache=False)
        start = int((row["input_ids"] == modelcfg.IMAGE_PAD_ID).nonzero()[0])
        a, b = (covered_tokens(row["vision_labels"], s, start) for s in named_shapes(item))
        end = inputs["input_ids"].shape[1]
        for layer, att in enumerate(out.attentions):
            for pos in range(end - 16, end):
                for head in range(att.shape[1]):
                    entry = mass[(pos - end, layer, head)]
                    entry[0] += float(att[0, head, pos, a].sum()) / len(items)
                    entry[1] += float(att[0, head, pos, b].sum()) / len(items)
    top = sorted(mass.items(), key=lambda kv: -sum(kv[1]))[:25]
    log.info(
        "%d yes/no questions (%s); position -1 is the last before the answer", len(items), lang
    )
    for (pos, layer, head), (on_a, on_b) in top:
        log.info("position %3d layer %d head %d: A %.3f B %.3f", pos, layer, head, on_a, on_b)


def relation_of(item: scenes.Sample) -> str:
    """The relation a yes/no spatial question asks about."""
    relation = names.relation_asked(item)
    assert relation is not None
    return relation


def error_keys(item: scenes.Sample) -> dict[str, str]:
    """The properties :func:`probe_errors` splits by."""
    a, b = named_shapes(item)
    scene, rel = item.scenes[0], relation_of(item)
    axis = {"left": -1.0, "right": 1.0, "above": -1.0, "below": 1.0}[rel]
    across = rel in ("left", "right")
    size = scene.width if across else scene.height
    offset = ((a.cx - b.cx) if across else (a.cy - b.cy)) * axis / size
    other = abs((a.cy - b.cy) if across else (a.cx - b.cx)) / (
        scene.height if across else scene.width
    )
    alike = names.look_alikes(item)
    return {
        "answer": "yes" if item.answer in ("yes", "是") else "no",
        "lang": item.lang,
        "relation": rel,
        "shapes": str(len(scene.shapes)),
        "look-alikes": str(min(alike, 3)) + ("+" if alike >= 3 else ""),
        "centre offset / side": f"{min(int(abs(offset) * 5), 3) / 5:.1f}+",
        "other-axis offset / side": f"{min(int(other * 5), 3) / 5:.1f}+",
    }


def probe_errors(args: argparse.Namespace) -> None:
    model, encode, yes, no, items = yes_no_questions(args)
    tally: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for item in items:
        inputs, _ = prompt_inputs(encode, item)
        with torch.no_grad():
            logits = model(**inputs, use_cache=False).logits[0, -1]
        said_yes = bool(logits[yes].max() > logits[no].max())
        right = said_yes == (item.answer in ("yes", "是"))
        for key in [("all", "all"), *error_keys(item).items()]:
            tally[key][0] += int(right)
            tally[key][1] += 1
    for (prop, value), (hit, n) in sorted(tally.items()):
        log.info("%-26s %-6s %4d questions, right %.3f", prop, value, n, hit / n)


def probe_shape(args: argparse.Namespace) -> None:
    model, encode = load(args.weights), train.Encoder(train.WEIGHTS)
    tokens = encode.processor.tokenizer
    tally: dict[str, int] = defaultdict(int)
    for item in scenes.held_out(args.n, 7, ("shape",)):
        inputs, _ = prompt_inputs(encode, item)
        with torch.no_grad():
            said = int(model(**inputs, use_cache=False).logits[0, -1].argmax())
        kinds = [s.kind for s in item.scenes[0].shapes]
        first = {k: tokens(_kind_word(k, item.lang))["input_ids"][0] for k in set(kinds)}
        right = said == tokens(item.answer)["input_ids"][0]
        several = "one kind" if len(set(kinds)) == 1 else "two kinds or more"
        for key in (item.lang, several):
            tally[f"{key}: questions"] += 1
            tally[f"{key}: right"] += int(right)
        if not right:
            most = max(kinds.count(k) for k in kinds)
            common = {first[k] for k in kinds if kinds.count(k) == most}
            tally["wrong"] += 1
            tally["wrong: a kind in the scene"] += int(said in first.values())
            tally["wrong: a most common kind"] += int(said in common)  # ties: each of them
    for key, value in sorted(tally.items()):
        log.info("%-32s %5d", key, value)


def probe_heads(args: argparse.Namespace) -> None:
    """The run's saved name and pair heads (``--heads``, its ``heads.pt``) on the yes/no
    spatial questions among the first ``--n`` spatial questions of set 7, per language:
    the labelled positions with every rank right."""
    model = load(args.weights)
    width = model.config.text_config.hidden_size
    states = torch.load(args.heads, map_location="cpu", weights_only=True)
    options = ["--out", "unused", "--name-weight", "1", "--pair-weight", "1"]
    options += ["--name-layer", str(args.name_layer), "--pair-layer", str(args.pair_layer)]
    heads = dict(train.language_heads(train.parse_args(options), width, torch.device("cpu")))
    for key, head in heads.items():
        head.load_state_dict(states[key])
    encode = train.Encoder(train.WEIGHTS)
    items = [s for s in scenes.held_out(args.n, 7, ("spatial",)) if s.answer in YES_NO]
    for lang in scenes.LANGS:
        rows = [encode(s) for s in items if s.lang == lang]
        batch = train.to_device(train.collate(rows), torch.device("cpu"))
        with torch.no_grad():
            hidden = train.forward_parts(model, batch, hidden=True).hidden
        for key, head in heads.items():
            _, stats = head.batch_loss(hidden, batch, key)  # type: ignore[arg-type]
            hit, n = int(stats["name_hit"]), int(stats["names"])
            log.info("%s %-11s right on %d of %d (%.3f)", lang, key, hit, n, hit / n)


def _kind_word(kind: str, lang: scenes.Lang) -> str:
    return kind if lang == "en" else scenes.SHAPE_ZH[kind]


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "what",
        choices=("ranks", "answer", "attention", "errors", "shape", "heads", "relation", "mixture"),
    )
    p.add_argument("--weights", type=Path, default=train.WEIGHTS)
    p.add_argument("--heads", type=Path, help="heads: the run's heads.pt")
    p.add_argument("--name-layer", type=int, default=3, help="heads: the name head's layer")
    p.add_argument("--pair-layer", type=int, default=4, help="heads: the pair head's layer")
    p.add_argument("--scenes", type=int, default=1500)
    p.add_argument("--train-options", default="", help="mixture: train.py's options")
    p.add_argument("--seed", type=int, default=1, help="mixture: the run's --seed")
    p.add_argument("--n", type=int, default=1200)
    p.add_argument(
        "--lang",
        choices=(*scenes.LANGS, "both"),
        default=None,
        help="attention (default en), answer (default both)",
    )
    args = p.parse_args()
    probes = {
        "ranks": probe_ranks,
        "answer": probe_answer,
        "attention": probe_attention,
        "errors": probe_errors,
        "shape": probe_shape,
        "heads": probe_heads,
        "relation": probe_relation,
        "mixture": probe_mixture,
    }
    probes[args.what](args)


if __name__ == "__main__":
    main()
