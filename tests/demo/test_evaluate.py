"""Scoring of the held-out evaluation, with stand-in answer functions."""

from __future__ import annotations

from collections.abc import Sequence

from qwen_ui.demo import scenes
from qwen_ui.demo.evaluate import Item, evaluate, normalize


def oracle(items: Sequence[Item]) -> list[str]:
    """Looks the answer up by question text and image sizes (regenerating the set)."""
    table = {
        (s.question, tuple(i.size for i in s.images())): s.answer
        for s in scenes.held_out(48, seed=2)
    }
    return [table[(q, tuple(i.size for i in imgs))].upper() + "." for imgs, q in items]


def test_normalize() -> None:
    assert normalize(" Yes. ") == "yes"
    assert normalize("第一张图。") == "第一张图"


def test_perfect_and_wrong_answers() -> None:
    good = evaluate(oracle, n=48, seed=2, batch_size=7)
    assert good.overall.correct == good.overall.total == 48
    assert set(good.by_kind) == set(scenes.KINDS) and set(good.by_lang) == {"en", "zh"}
    assert all(t.total == 6 for t in good.by_kind.values())
    bad = evaluate(lambda items: ["?"] * len(items), n=48, seed=2)
    assert bad.overall.correct == 0 and len(bad.mistakes) == 20
    result = bad.to_dict()
    assert result["overall"] == {"accuracy": 0.0, "correct": 0, "total": 48}
    assert list(result["by_kind"]) == list(scenes.KINDS)


def test_yes_no_questions_are_split_by_the_right_answer() -> None:
    """A model that always says no: right on every 'no', wrong on every 'yes'."""

    def no(items: Sequence[Item]) -> list[str]:
        return ["否" if any("\u4e00" <= c <= "\u9fff" for c in q) else "no" for _, q in items]

    report = evaluate(no, n=96, seed=2)
    samples = scenes.held_out(96, seed=2)
    spatial_no = sum(s.kind == "spatial" and s.answer in ("no", "否") for s in samples)
    result = report.to_dict()["by_yes_no"]
    assert set(result) <= {"exists: yes", "exists: no", "spatial: yes", "spatial: no"}
    assert result["spatial: no"] == {"accuracy": 1.0, "correct": spatial_no, "total": spatial_no}
    assert result["spatial: yes"]["accuracy"] == 0.0 and result["spatial: yes"]["total"] > 0
    assert result["exists: yes"]["correct"] == 0  # and existence's Chinese no is 没有, not 否
    open_form = sum(
        s.kind == "spatial" and s.answer not in ("yes", "no", "是", "否") for s in samples
    )
    assert (
        result["spatial: yes"]["total"] + spatial_no + open_form == report.by_kind["spatial"].total
    )
