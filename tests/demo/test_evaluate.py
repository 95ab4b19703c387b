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
