"""Held-out evaluation of a shapes demo model: accuracy overall, per question type and
per language, on seeds never used in training (``scenes.held_out``).

The model is reached through an :data:`AnswerFn`: a batch of (images, question) in, one
answer string per item out. :mod:`qwen_ui.demo.answer` builds one on plain transformers
``generate``; the engine can supply its own.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from PIL import Image

from qwen_ui.demo import scenes
from qwen_ui.engine.boxes import RawBox, parse_boxes

log = logging.getLogger(__name__)

Item = tuple[list[Image.Image], str]
AnswerFn = Callable[[Sequence[Item]], list[str]]


def normalize(text: str) -> str:
    """Compare answers without case, surrounding space or a final full stop."""
    return text.strip().rstrip(".。!！").strip().lower()


IOU_BAR = 0.5  # a located shape is found by a box overlapping it at least this much


def iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """Intersection over union of two ``(x1, y1, x2, y2)`` boxes."""
    across = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    down = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = across * down
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def boxes_of(text: str) -> tuple[RawBox, ...]:
    """The boxes of a Qwen2.5-VL answer (the engine's parser), in the resized image."""
    return parse_boxes(text, "qwen2_5_vl").boxes


def coords_of(text: str) -> list[tuple[float, ...]]:
    """The ``(x1, y1, x2, y2)`` of each box of a Qwen2.5-VL answer, in order."""
    return [tuple(map(float, b.box)) for b in boxes_of(text)]


def matches(got: Sequence[tuple[float, ...]], want: Sequence[tuple[float, ...]]) -> bool:
    """Boxes ``got`` match ``want`` one to one (in any order), each pair with IoU >=
    :data:`IOU_BAR`, with no box left over on either side; never when ``want`` is empty."""
    if len(got) != len(want) or not want:
        return False
    return any(
        all(iou(w, g) >= IOU_BAR for w, g in zip(want, order, strict=True))
        for order in itertools.permutations(got)
    )


def located(answer: str, expected: str) -> bool:
    """A grounding answer is right when its boxes :func:`matches` the expected ones."""
    return matches(coords_of(answer), coords_of(expected))


def is_right(item: scenes.Sample, answer: str) -> bool:
    """Grounding by :func:`located`; every other type (the refusal too) by exact match."""
    if item.kind == "grounding":
        return located(answer, item.answer)
    return normalize(answer) == normalize(item.answer)


# the grammar's yes/no answers in both languages (scenes.YES/NO for existence,
# scenes.TRUE/FALSE for the spatial yes/no form)
POLARITY = {
    **{a: "yes" for a in (*scenes.YES.values(), *scenes.TRUE.values())},
    **{a: "no" for a in (*scenes.NO.values(), *scenes.FALSE.values())},
}


def yes_no_key(item: scenes.Sample) -> str | None:
    """``"<type>: yes"`` or ``"<type>: no"`` for a question whose right answer is yes or
    no, else None: a model that always gives the more frequent answer scores 100 % on one
    key and 0 % on the other, which the per-type figure hides."""
    polarity = POLARITY.get(item.answer)
    return f"{item.kind}: {polarity}" if polarity else None


def in_lang(key: str, lang: str) -> str:
    """A yes/no key split by language: ``"spatial: yes, en"``."""
    return f"{key}, {lang}"


def score_keys(kind: str, lang: str, yes_no: str) -> tuple[str, ...]:
    """The keys one answer counts under in the training scores (``train.evaluate``,
    ``tune_lm.evaluate``): all, its type, its language and, for a yes/no question
    (``yes_no`` from :func:`yes_no_key`, else empty), that key alone and by language."""
    if not yes_no:
        return ("all", kind, lang)
    return ("all", kind, lang, yes_no, in_lang(yes_no, lang))


# the axis of a spatial question, from its relation's words in either language
_AXIS = {
    "left": "left/right",
    "right": "left/right",
    "above": "above/below",
    "below": "above/below",
}
AXES = {
    words: _AXIS[rel] for table in (scenes.REL_EN, scenes.REL_ZH) for rel, words in table.items()
}


def spatial_key(item: scenes.Sample) -> str | None:
    """``"<form>, <axis>"`` of a spatial question: its form ("which": "What shape is left
    of the blue square?", or "yes/no") and its axis, or None for other types."""
    if item.kind != "spatial":
        return None
    form = "yes/no" if item.answer in POLARITY else "which"
    axis = next(a for words, a in AXES.items() if words in item.question)
    return f"{form}, {axis}"


def grounding_key(item: scenes.Sample) -> str | None:
    """``"one"`` for a grounding question about one shape ("Where is the red circle?"),
    ``"every"`` for one about every shape of a kind ("Where are the stars?", 2 or more
    boxes), or None for other types: the second form asks for several boxes in turn,
    which the per-type figure hides."""
    if item.kind != "grounding":
        return None
    return "one" if len(boxes_of(item.answer)) == 1 else "every"


@dataclass
class Tally:
    correct: int = 0
    total: int = 0

    def add(self, ok: bool) -> None:
        self.correct += int(ok)
        self.total += 1

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0


@dataclass
class Report:
    """Accuracy of one evaluation run, with a few wrong answers as examples."""

    n: int
    seed: int
    kinds: tuple[str, ...] = scenes.KINDS
    seconds: float = 0.0
    overall: Tally = field(default_factory=Tally)
    by_kind: dict[str, Tally] = field(default_factory=dict)
    by_lang: dict[str, Tally] = field(default_factory=dict)
    by_yes_no: dict[str, Tally] = field(default_factory=dict)
    by_yes_no_lang: dict[str, Tally] = field(default_factory=dict)
    by_spatial: dict[str, Tally] = field(default_factory=dict)
    by_grounding: dict[str, Tally] = field(default_factory=dict)
    mistakes: list[dict[str, str]] = field(default_factory=list)

    def record(self, item: scenes.Sample, answer: str) -> None:
        ok = is_right(item, answer)
        self.overall.add(ok)
        self.by_kind.setdefault(item.kind, Tally()).add(ok)
        self.by_lang.setdefault(item.lang, Tally()).add(ok)
        if (key := yes_no_key(item)) is not None:
            self.by_yes_no.setdefault(key, Tally()).add(ok)
            self.by_yes_no_lang.setdefault(in_lang(key, item.lang), Tally()).add(ok)
        if (key := spatial_key(item)) is not None:
            self.by_spatial.setdefault(key, Tally()).add(ok)
        if (key := grounding_key(item)) is not None:
            self.by_grounding.setdefault(key, Tally()).add(ok)
        if not ok and len(self.mistakes) < 20:
            self.mistakes.append(
                {
                    "seed": str(item.seed),
                    "question": item.question,
                    "expected": item.answer,
                    "got": answer,
                }
            )

    def to_dict(self) -> dict[str, Any]:
        def row(t: Tally) -> dict[str, Any]:
            return {"accuracy": round(t.accuracy, 4), "correct": t.correct, "total": t.total}

        return {
            "n": self.n,
            "seed": self.seed,
            "kinds": list(self.kinds),
            "seconds": round(self.seconds, 1),
            "overall": row(self.overall),
            "by_kind": {k: row(self.by_kind[k]) for k in scenes.ALL_KINDS if k in self.by_kind},
            "by_lang": {k: row(v) for k, v in sorted(self.by_lang.items())},
            "by_yes_no": {k: row(v) for k, v in sorted(self.by_yes_no.items())},
            "by_yes_no_lang": {k: row(v) for k, v in sorted(self.by_yes_no_lang.items())},
            "by_spatial": {k: row(v) for k, v in sorted(self.by_spatial.items())},
            "by_grounding": {k: row(v) for k, v in sorted(self.by_grounding.items())},
            "mistakes": self.mistakes,
        }


def evaluate(
    answer: AnswerFn,
    n: int = 2000,
    seed: int = 0,
    batch_size: int = 16,
    progress: Callable[[int, int], None] | None = None,
    kinds: tuple[str, ...] = scenes.KINDS,
) -> Report:
    """Ask ``n`` held-out questions of ``kinds`` (any of :data:`scenes.ALL_KINDS`,
    balanced over those types and the languages) through ``answer``."""
    items = scenes.held_out(n, seed, kinds)
    report = Report(n=n, seed=seed, kinds=kinds)
    start = time.perf_counter()
    for i in range(0, n, batch_size):
        chunk = items[i : i + batch_size]
        answers = answer([(item.images(), item.question) for item in chunk])
        for item, got in zip(chunk, answers, strict=True):
            report.record(item, got)
        if progress is not None:
            progress(min(i + batch_size, n), n)
    report.seconds = time.perf_counter() - start
    log.info("evaluated %d questions: %.4f", n, report.overall.accuracy)
    return report
