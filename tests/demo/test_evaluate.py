"""Scoring of the held-out evaluation, with stand-in answer functions."""

from __future__ import annotations

from collections.abc import Sequence

from qwen_ui.demo import scenes
from qwen_ui.demo.evaluate import (
    POLARITY,
    Item,
    evaluate,
    grounding_key,
    normalize,
    score_keys,
    spatial_key,
)


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


def test_score_keys() -> None:
    assert score_keys("count", "zh", "") == ("all", "count", "zh")
    assert score_keys("spatial", "en", "spatial: yes") == (
        "all",
        "spatial",
        "en",
        "spatial: yes",
        "spatial: yes, en",
    )


def test_one_type_only() -> None:
    report = evaluate(lambda items: ["?"] * len(items), n=20, seed=2, kinds=("spatial",))
    assert report.overall.total == report.by_kind["spatial"].total == 20
    assert set(report.by_kind) == {"spatial"} and set(report.by_lang) == {"en", "zh"}
    assert report.to_dict()["kinds"] == ["spatial"]


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
    by_lang = report.to_dict()["by_yes_no_lang"]
    for key, tally in result.items():  # each key split in two languages that add up
        halves = [by_lang[f"{key}, {lang}"] for lang in scenes.LANGS]
        assert [sum(h[f] for h in halves) for f in ("correct", "total")] == [
            tally["correct"],
            tally["total"],
        ]
    english_no = sum(s.answer == "no" and s.kind == "spatial" for s in samples)
    assert by_lang["spatial: no, en"]["total"] == english_no


def test_spatial_questions_are_split_by_form_and_axis() -> None:
    """Right only on the "which" form: the yes/no keys are all wrong, the which keys right."""
    samples = scenes.held_out(160, seed=3)
    truth = {(s.question, tuple(i.size for i in s.images())): s.answer for s in samples}

    def which_only(items: Sequence[Item]) -> list[str]:
        answers = [truth[(q, tuple(i.size for i in imgs))] for imgs, q in items]
        return [a if a not in POLARITY else "?" for a in answers]

    result = evaluate(which_only, n=160, seed=3).to_dict()["by_spatial"]
    assert set(result) == {
        f"{form}, {axis}" for form in ("which", "yes/no") for axis in ("left/right", "above/below")
    }
    for key, row in result.items():
        assert row["accuracy"] == (1.0 if key.startswith("which") else 0.0), key
    assert sum(row["total"] for row in result.values()) == sum(s.kind == "spatial" for s in samples)
    assert spatial_key(scenes.sample(scenes.HELD_OUT_BASE, "count")) is None


def test_grounding_is_split_by_form() -> None:
    """Right only where one box is asked for: "one" all right, "every" all wrong."""
    samples = scenes.held_out(40, seed=2, kinds=("grounding",))
    truth = {(s.question, tuple(i.size for i in s.images())): s.answer for s in samples}

    def one_only(items: Sequence[Item]) -> list[str]:
        answers = [truth[(q, tuple(i.size for i in imgs))] for imgs, q in items]
        return [a if a.count('"bbox_2d"') == 1 else "?" for a in answers]

    result = evaluate(one_only, n=40, seed=2, kinds=("grounding",)).to_dict()["by_grounding"]
    assert set(result) == {"one", "every"}
    assert result["one"]["accuracy"] == 1.0 and result["every"]["accuracy"] == 0.0
    assert result["one"]["total"] + result["every"]["total"] == 40
    assert grounding_key(scenes.sample(scenes.HELD_OUT_BASE, "count")) is None


def test_grounding_is_scored_by_iou_one_box_per_shape() -> None:
    from qwen_ui.demo.evaluate import is_right

    items = scenes.held_out(40, seed=1, kinds=("grounding",))
    two = next(s for s in items if s.answer.count("bbox_2d") == 2)
    assert is_right(two, two.answer)
    rows = two.answer.removeprefix("```json\n[").removesuffix("]\n```").split("}, ")
    swapped = "[" + rows[1].rstrip("}") + "}, " + rows[0] + "}]"
    assert is_right(two, swapped)  # order free; no fence needed
    assert not is_right(two, "[" + rows[0] + "}]")  # a shape missed
    extra = '{"bbox_2d": [0, 0, 9, 9], "label": "x"}'
    assert not is_right(two, two.answer.replace("[{", "[" + extra + ", {"))  # a box too many
    one = next(s for s in items if s.answer.count("bbox_2d") == 1)
    x1, y1, x2, y2 = (int(v) for v in one.answer.split("[", 2)[2].split("]")[0].split(", "))
    w = x2 - x1
    shifted = one.answer.replace(f"[{x1}, {y1}, {x2}, {y2}]", f"[{x1 + w}, {y1}, {x2 + w}, {y2}]")
    nudged = one.answer.replace(f"[{x1}, {y1}, {x2}, {y2}]", f"[{x1 + 2}, {y1}, {x2 + 2}, {y2}]")
    assert not is_right(one, shifted) and is_right(one, nudged)
    assert not is_right(one, "no") and not is_right(one, one.answer[:-12])


def test_boxes_match_one_to_one_in_any_order() -> None:
    from qwen_ui.demo.evaluate import matches

    a, b = (0.0, 0.0, 10.0, 10.0), (20.0, 0.0, 30.0, 10.0)
    assert matches([b, a], [a, b])
    assert matches([(1.0, 0.0, 11.0, 10.0)], [a])  # IoU 9/11
    assert not matches([(5.0, 0.0, 15.0, 10.0)], [a])  # IoU 1/3
    assert not matches([a, a], [a, b])  # one shape boxed twice, the other missed
    assert not matches([a], [a, b]) and not matches([a, b], [a])
    assert not matches([], [])  # nothing asked is nothing located


def test_new_kinds_are_reported_and_the_refusal_must_be_exact() -> None:
    items = scenes.held_out(24, seed=2, kinds=scenes.EXTRA_KINDS)
    table = {(s.question, tuple(i.size for i in s.images())): s.answer for s in items}

    def look_up(batch: Sequence[Item]) -> list[str]:
        return [table[(q, tuple(i.size for i in imgs))] for imgs, q in batch]

    report = evaluate(look_up, 24, 2, kinds=scenes.EXTRA_KINDS)
    assert report.overall.correct == 24
    assert list(report.to_dict()["by_kind"]) == list(scenes.EXTRA_KINDS)
    refusals = [s for s in items if s.kind == "off_grammar"]
    wrong = evaluate(lambda batch: ["no"] * len(batch), 24, 2, kinds=scenes.EXTRA_KINDS)
    assert wrong.by_kind["off_grammar"].correct == 0 and len(refusals) == 12
