"""``training/grounding_mistakes.py``: which box of an every-shape grounding answer goes
wrong first, and what it is."""

from __future__ import annotations

import json

import pytest

from qwen_ui.demo import locate, scenes
from qwen_ui.demo.evaluate import coords_of
from qwen_ui.demo.install import weights_dir
from training import grounding_mistakes as gm

A, B, C = (0.0, 0.0, 10.0, 10.0), (20.0, 0.0, 30.0, 10.0), (40.0, 0.0, 50.0, 10.0)
OTHER = (60.0, 0.0, 70.0, 10.0)  # a shape of another kind


def test_first_wrong_box() -> None:
    assert gm.first_wrong([A, B], [A, B]) is None
    assert gm.first_wrong([A, B], [(0.0, 0.0, 10.0, 11.0), B]) is None  # IoU 0.91
    assert gm.first_wrong([A, B, C], [A, C, C]) == 1
    assert gm.first_wrong([A, B, C], [A, B]) == 2  # stopped early
    assert gm.first_wrong([A, B], [A, B, C]) == 2  # one too many
    assert gm.first_wrong([A, B], []) == 0


@pytest.mark.parametrize(
    ("want", "got", "expected"),
    [
        ([A, B], [A, A], "repeats an earlier box"),
        ([A, B, C], [A, C, B], "another asked shape, out of order"),
        ([A, B], [A, OTHER], "a shape of another kind"),
        ([A, B], [A, (24.0, 0.0, 34.0, 10.0)], "near an asked shape"),  # IoU 0.43 with B
        ([A, B], [A, (80.0, 50.0, 90.0, 60.0)], "on no shape"),
        ([A, B], [A], "too few boxes"),
        ([A, B, C], [A, B, C, OTHER], "too many boxes"),
    ],
)
def test_what_the_first_wrong_box_is(want: list[gm.Box], got: list[gm.Box], expected: str) -> None:
    index = gm.first_wrong(want, got)
    assert index is not None
    assert gm.what(index, want, got, [A, B, C, OTHER]) == expected


def test_items_are_the_every_shape_questions_of_the_evaluation() -> None:
    items = gm.every_shape_items(200, seed=0)
    drawn = scenes.held_out(200, 0, ("off_grammar", "grounding"))
    assert items == [s for s in drawn if s in items]  # in the evaluation's order
    assert 20 < len(items) < 60
    assert all(s.kind == "grounding" and len(coords_of(s.answer)) >= 2 for s in items)


def test_tally_counts_right_answers_and_classifies_the_rest() -> None:
    items = gm.every_shape_items(200, seed=0)[:6]
    answers = [s.answer for s in items]
    first = coords_of(items[0].answer)
    x1, y1, x2, y2 = (round(v) for v in first[0])
    answers[0] = locate.answer_text([((x1, y1, x2, y2), "x")] * len(first))  # all the first
    result = gm.tally(items, answers)
    assert sum(v["of"] for v in result["right_by_boxes"].values()) == 6
    assert sum(v["right"] for v in result["right_by_boxes"].values()) == 5
    assert result["first_wrong_box"] == {f"box 2 of {len(first)}": 1}
    assert result["first_wrong_box_is"] == {"repeats an earlier box": 1}


def test_main_asks_the_shipped_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert gm.main([str(weights_dir("bf16")), "--n", "24", "--batch-size", "8"]) == 0
    result = json.loads(capsys.readouterr().out)
    asked = len(gm.every_shape_items(24, 0))
    assert result["questions"] == asked > 0
    assert sum(v["of"] for v in result["right_by_boxes"].values()) == asked
    wrong = asked - sum(v["right"] for v in result["right_by_boxes"].values())
    assert sum(result["first_wrong_box"].values()) == wrong
    assert sum(result["first_wrong_box_is"].values()) == wrong
