"""Training-only supervision of the language model where a question names a shape.

A spatial question names one shape ("What shape is left of the blue square?") or two ("Is
the red circle to the left of the blue square?"), each unique in its scene. The held-out
errors of the yes/no form grow with the shapes that share a colour or a kind with the
named ones (``training/probe_demo.py errors``): the language model finds the red things
and the circles, not the red circle. :class:`NameHead` asks a middle layer's hidden
state, at the last token of each name, for that shape's ranks across and down among the
scene's shapes (:func:`scenes.shape_ranks`), which only the named shape's own visual
tokens can give, and which are what the yes/no answer compares. A second head (``slots``
= 2, :func:`pair_labels`) asks a later layer, at the position that gives a yes/no
answer, for both named shapes' ranks: what the answer is then a comparison of. Not part
of the saved model.

A colour question ("What colour is the star?") and a shape question ("What shape is the
red one?") each name one shape too, by its kind or by its colour alone
(:func:`referents`). A language model trained from scratch learned the first and not the
second (the thirteenth session's run 31: `shape` 61 %, right when the scene holds one
kind of shape, little better than a guess among the kinds present otherwise), so the
name head can label those names as well (``train.py --name-kinds``). It found the red one
and still answered the scene's commonest kind; the referent head, at the position that
answers, fixed that in 800 steps (the fourteenth session's run 33). :func:`answer_labels`
asks the same of other types: a middle layer, at the position that gives each answer's
first token, says that token (the answer asked early, as deep supervision does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from qwen_ui.demo import scenes
from training import locate_heads

N_AXES = 2  # across and down


def named_shapes(item: scenes.Sample) -> list[tuple[int, scenes.Shape]]:
    """The unique shapes a spatial question names, in the order it names them, each with
    the end (a character offset in ``item.question``) of its name; none for other types."""
    if item.kind != "spatial":
        return []
    scene = item.scenes[0]
    found = []
    for shape in scene.shapes:
        name = scenes.shape_name(shape, item.lang)
        at = item.question.find(name)
        if at >= 0 and scene.count(shape.colour, shape.kind) == 1:
            found.append((at + len(name), shape))
    return sorted(found, key=lambda pair: pair[0])


SINGLE_NAME_KINDS = ("colour", "shape")  # name one shape by its kind or by its colour
NAMING_KINDS = ("spatial", *SINGLE_NAME_KINDS)  # the question types that name a shape


def referents(item: scenes.Sample) -> list[tuple[int, scenes.Shape]]:
    """:func:`named_shapes` for a spatial question; for a colour question the one shape of
    the kind it names, for a shape question the one shape of the colour it names, with
    the end of that word; none for other types."""
    if item.kind == "spatial":
        return named_shapes(item)
    if item.kind not in SINGLE_NAME_KINDS:
        return []
    scene = item.scenes[0]
    found = []
    for shape in scene.shapes:
        name = _single_name(shape, item.kind, item.lang)
        at = item.question.find(name)
        if at >= 0 and _alone(scene, shape, item.kind):
            found.append((at + len(name), shape))
    return found


def _single_name(shape: scenes.Shape, kind: str, lang: scenes.Lang) -> str:
    """The word a colour question names ``shape`` by (its kind), or a shape question (its
    colour)."""
    if kind == "colour":
        return shape.kind if lang == "en" else scenes.SHAPE_ZH[shape.kind]
    return shape.colour if lang == "en" else scenes.COLOUR_ZH[shape.colour]


def _alone(scene: scenes.Scene, shape: scenes.Shape, kind: str) -> bool:
    """``shape`` is the only one of its kind (a colour question) or colour (a shape one)."""
    return shape in scenes.alone_shapes(scene, "kind" if kind == "colour" else "colour")


def look_alikes(item: scenes.Sample) -> int:
    """For each shape a spatial question names, the other shapes of the scene that share
    its colour or its kind, summed (a shape like both named ones counts twice)."""
    scene = item.scenes[0]
    return sum(
        1
        for _, named in named_shapes(item)
        for other in scene.shapes
        if other is not named and (other.colour == named.colour or other.kind == named.kind)
    )


def _named_ranks(
    item: scenes.Sample, kinds: tuple[str, ...] = ("spatial",)
) -> list[tuple[int, tuple[int, int]]]:
    """:func:`referents` (of a question of one of ``kinds``) with each shape's ranks
    (across, down) in place of it."""
    named = referents(item) if item.kind in kinds else []
    if not named:
        return []
    scene = item.scenes[0]
    ranks = scenes.shape_ranks(scene)
    return [(end, ranks[scene.shapes.index(shape)]) for end, shape in named]


def name_labels(
    item: scenes.Sample, tokenizer: Any, start: int, kinds: tuple[str, ...] = ("spatial",)
) -> torch.Tensor:
    """``[names, 3]``: per shape a question of one of ``kinds`` names, the position of the
    token holding the last character of its name (``start``: the question's first token
    in the sample's ids) and the shape's two ranks."""
    named = _named_ranks(item, kinds)
    rows = []
    if named:  # the question's offsets: one more tokenizer call, naming samples only
        offsets = tokenizer(item.question, return_offsets_mapping=True)["offset_mapping"]
        for end, ranks in named:
            token = next(i for i, (lo, hi) in enumerate(offsets) if lo < end <= hi)
            rows.append([start + token, *ranks])
    return torch.tensor(rows, dtype=torch.long).view(-1, 1 + N_AXES)


def pair_labels(item: scenes.Sample, answer_at: int) -> torch.Tensor:
    """``[1, 5]`` for a yes/no spatial question: the position whose logits give the answer
    (``answer_at``), then A's ranks and B's (across, down); ``[0, 5]`` otherwise."""
    named = _named_ranks(item)
    if len(named) != 2:
        return torch.zeros((0, 1 + 2 * N_AXES), dtype=torch.long)
    return torch.tensor([[answer_at, *(r for _, ranks in named for r in ranks)]])


def referent_labels(item: scenes.Sample, answer_at: int) -> torch.Tensor:
    """``[1, 2]`` for a colour or shape question: the position whose logits give the
    answer (``answer_at``) and the referent's (kind, colour) class
    (:func:`scenes.joint_class`),
    whose kind or colour the answer is; ``[0, 2]`` otherwise. As the pair head brings
    both ranks to where a yes/no answer is made, this brings the referent's kind and
    colour there (run 31 found the red one and answered the scene's commonest kind)."""
    found = referents(item) if item.kind in SINGLE_NAME_KINDS else []
    if len(found) != 1:
        return torch.zeros((0, 2), dtype=torch.long)
    return torch.tensor([[answer_at, scenes.joint_class(found[0][1])]])


def relation_asked(item: scenes.Sample) -> str | None:
    """The relation (of :data:`scenes.RELATIONS`) a spatial question asks about; ``None``
    for other types."""
    if item.kind != "spatial":
        return None
    words = scenes.REL_EN if item.lang == "en" else scenes.REL_ZH
    return next(rel for rel in scenes.RELATIONS if words[rel] in item.question)


def asked_labels(item: scenes.Sample, answer_at: int) -> torch.Tensor:
    """``[1, 2]`` for a spatial question (either form): the position whose logits give the
    answer (``answer_at``) and the relation it asks (its index in
    :data:`scenes.RELATIONS`); ``[0, 2]`` otherwise. The pair head brings the two ranks a
    yes/no answer compares to that position; this brings what to compare them by, in one
    code for both languages (the English question says it before the second name, the
    Chinese one after both)."""
    relation = relation_asked(item)
    if relation is None:
        return torch.zeros((0, 2), dtype=torch.long)
    return torch.tensor([[answer_at, scenes.RELATIONS.index(relation)]])


ANSWER_KINDS = ("count", "exists")  # the answer head's default: the types run 31 missed


def answer_labels(
    item: scenes.Sample, answer_at: int, token: int, kinds: tuple[str, ...] = ANSWER_KINDS
) -> torch.Tensor:
    """``[1, 2]`` for a question of one of ``kinds``: the position whose logits give the
    answer's first token (``answer_at``) and that token; ``[0, 2]`` otherwise."""
    if item.kind not in kinds:
        return torch.zeros((0, 2), dtype=torch.long)
    return torch.tensor([[answer_at, token]])


@dataclass(frozen=True)
class Labelling:
    """The question types the heads label: the names of ``name_kinds`` (the name head) and
    the answers of ``answer_kinds`` (the answer head); the pair, referent, asked and
    coordinate labels go with their own types."""

    name_kinds: tuple[str, ...] = ("spatial",)
    answer_kinds: tuple[str, ...] = ANSWER_KINDS

    def turn_labels(
        self, turn: scenes.Sample, tokenizer: Any, start: int, answer_at: int, token: int
    ) -> dict[str, torch.Tensor]:
        """Every head's labels of one turn, by batch key: its question starts at ``start``
        in the sample's ids, and the logits at ``answer_at`` give its answer's first
        ``token``."""
        return {
            "name_labels": name_labels(turn, tokenizer, start, self.name_kinds),
            "pair_labels": pair_labels(turn, answer_at),
            "referent_labels": referent_labels(turn, answer_at),
            "answer_labels": answer_labels(turn, answer_at, token, self.answer_kinds),
            "asked_labels": asked_labels(turn, answer_at),
            "coordinate_labels": locate_heads.coordinate_labels(turn, tokenizer, answer_at),
        }


DEFAULT_LABELLING = Labelling()  # spatial names; count and existence answers


class NameHead(torch.nn.Module):
    """A linear head on the hidden state after language-model layer ``layer``, read at the
    positions of its labels: ``outputs`` labels of ``classes`` classes each. By default
    one shape's ranks across and down (:func:`name_labels`); the pair head reads two
    shapes' (``outputs`` = 2 x :data:`N_AXES`, :func:`pair_labels`), the referent head one
    (kind, colour) class (``outputs`` = 1, ``classes`` = :data:`scenes.JOINT_CLASSES`,
    :func:`referent_labels`)."""

    def __init__(
        self,
        width: int,
        weight: float,
        layer: int,
        outputs: int = N_AXES,
        classes: int = scenes.MAX_SHAPES,
    ) -> None:
        super().__init__()
        self.outputs = outputs
        self.classes = classes
        self.proj = torch.nn.Linear(width, self.outputs * classes)
        torch.nn.init.zeros_(self.proj.weight)
        torch.nn.init.zeros_(self.proj.bias)
        self.weight = weight
        self.layer = layer

    def batch_loss(
        self, hidden: tuple[torch.Tensor, ...], batch: dict[str, Any], key: str
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """:meth:`loss` of the batch's ``key`` labels on the hidden state it reads."""
        return self.loss(hidden[self.layer], batch[key])

    def loss(
        self, hidden: torch.Tensor, labels: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Cross-entropy of the labels over the labelled positions, times ``weight``, and
        how many positions have every label right. ``hidden``: ``[batch, tokens, width]``;
        ``labels``: ``[positions, 2 + outputs]`` (row in the batch, position, labels)."""
        states = hidden[labels[:, 0], labels[:, 1]].float()
        logits = self.proj(states).view(-1, self.outputs, self.classes)
        ranks = labels[:, 2:]
        if len(labels) == 0:
            loss = logits.sum()  # zero, and still part of the graph
        else:
            loss = F.cross_entropy(logits.reshape(-1, self.classes), ranks.reshape(-1))
        right = (logits.argmax(2) == ranks).all(1)
        return self.weight * loss, {
            "name_hit": right.sum(),
            "names": labels.new_tensor(len(labels)),
        }
