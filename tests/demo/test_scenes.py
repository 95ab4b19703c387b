"""The scene generator: deterministic per seed, answers consistent with the scenes."""

from __future__ import annotations

import re

import pytest

from qwen_ui.demo import scenes


@pytest.mark.parametrize("seed", [0, 1, 12345, scenes.HELD_OUT_BASE + 7])
def test_same_seed_same_sample(seed: int) -> None:
    a, b = scenes.sample(seed), scenes.sample(seed)
    assert a == b
    assert a.png_bytes() == b.png_bytes()


def test_different_seeds_differ() -> None:
    samples = [scenes.sample(seed) for seed in range(50)]
    assert len({(s.question, s.answer, s.scenes) for s in samples}) == 50


def test_held_out_is_balanced_and_outside_training_seeds() -> None:
    items = scenes.held_out(64, seed=3)
    pairs = {(s.kind, s.lang) for s in items}
    assert pairs == {(k, lang) for k in scenes.KINDS for lang in scenes.LANGS}
    assert all(s.seed >= scenes.HELD_OUT_BASE for s in items)
    assert scenes.held_out(64, seed=3) == items


def test_held_out_of_some_types_is_balanced_over_them_and_the_languages() -> None:
    items = scenes.held_out(40, seed=3, kinds=("spatial", "count"))
    assert {(s.kind, s.lang) for s in items} == {
        (k, lang) for k in ("spatial", "count") for lang in scenes.LANGS
    }
    assert all(sum(s.kind == k for s in items) == 20 for k in ("spatial", "count"))
    assert all(s.seed >= scenes.HELD_OUT_BASE for s in items)
    # the same questions the whole set asks of those types, in order
    assert items == [s for s in scenes.held_out(160, seed=3) if s.kind in ("spatial", "count")]
    assert scenes.held_out(40, seed=3, kinds=scenes.KINDS) == scenes.held_out(40, seed=3)


@pytest.mark.parametrize("kinds", [(), ("spatial", "colours")])
def test_held_out_refuses_unknown_or_no_types(kinds: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match="question types must be some of"):
        scenes.held_out(4, kinds=kinds)


@pytest.mark.parametrize("seed", range(40))
def test_scene_bounds(seed: int) -> None:
    sample = scenes.sample(seed)
    assert 1 <= len(sample.scenes) <= 3
    for scene in sample.scenes:
        assert 160 <= scene.width <= 480 and 160 <= scene.height <= 480
        assert 1 <= len(scene.shapes) <= scenes.MAX_SHAPES
        for s in scene.shapes:
            assert s.r <= s.cx <= scene.width - s.r and s.r <= s.cy <= scene.height - s.r
    for image, scene in zip(sample.images(), sample.scenes, strict=True):
        assert image.size == (scene.width, scene.height) and image.mode == "RGB"


def count_answer(sample: scenes.Sample) -> int:
    """Recount from the scene what a counting question asks (parsing the English)."""
    q = sample.question.removeprefix("How many ").removesuffix(" are there?").split()
    colour = q[0] if q[0] in scenes.COLOURS else None
    noun = q[-1]
    kind = next((k for k, p in scenes.SHAPE_PLURAL.items() if p == noun), None)
    return sample.scenes[0].count(colour, kind)


@pytest.mark.parametrize("seed", range(30))
def test_count_answers_match_the_scene(seed: int) -> None:
    sample = scenes.sample(seed, kind="count", lang="en")
    assert int(sample.answer) == count_answer(sample)
    total = scenes.sample(seed, kind="total", lang="zh")
    assert int(total.answer) == len(total.scenes[0].shapes)


@pytest.mark.parametrize("seed", range(30))
def test_unique_attribute_questions(seed: int) -> None:
    colour_q = scenes.sample(seed, kind="colour", lang="en")
    kind = colour_q.question.split()[-1].rstrip("?")
    (target,) = [s for s in colour_q.scenes[0].shapes if s.kind == kind]
    assert colour_q.answer == target.colour
    shape_q = scenes.sample(seed, kind="shape", lang="zh")
    zh_colour = shape_q.question.split("的")[0]
    colour = next(c for c, z in scenes.COLOUR_ZH.items() if z == zh_colour)
    (target,) = [s for s in shape_q.scenes[0].shapes if s.colour == colour]
    assert shape_q.answer == scenes.SHAPE_ZH[target.kind]


@pytest.mark.parametrize("seed", range(30))
def test_multi_image_answers(seed: int) -> None:
    compare = scenes.sample(seed, kind="multi_compare", lang="en")
    noun = compare.question.split()[-1].rstrip("?")
    kind = next(k for k, p in scenes.SHAPE_PLURAL.items() if p == noun)
    counts = [scene.count(kind=kind) for scene in compare.scenes]
    assert counts.count(max(counts)) == 1
    assert compare.answer == scenes.ORDINAL_EN[counts.index(max(counts))]
    together = scenes.sample(seed, kind="multi_count", lang="zh")
    kind = next(k for k, z in scenes.SHAPE_ZH.items() if together.question.endswith(z + "？"))
    assert int(together.answer) == sum(s.count(kind=kind) for s in together.scenes)


def find(scene: scenes.Scene, colour: str, kind: str) -> scenes.Shape:
    (shape,) = [s for s in scene.shapes if s.colour == colour and s.kind == kind]
    return shape


def relation(words: str) -> str:
    return next(r for r, text in scenes.REL_EN.items() if words.endswith(text))


@pytest.mark.parametrize("seed", range(60))
def test_spatial_answers_hold(seed: int) -> None:
    sample = scenes.sample(seed, kind="spatial", lang="en")
    scene = sample.scenes[0]
    words = sample.question.rstrip("?").split()
    if sample.question.startswith("What shape is"):
        rel = relation(" ".join(words[3:-3]))
        ref = find(scene, words[-2], words[-1])
        hits = [s for s in scene.shapes if s is not ref and scenes.holds(rel, s, ref)]
        assert [h.kind for h in hits] == [sample.answer]
    else:
        a = find(scene, words[2], words[3])
        b = find(scene, words[-2], words[-1])
        rel = relation(" ".join(words[4:-3]))
        if sample.answer == "yes":
            assert scenes.holds(rel, a, b)
        else:
            assert sample.answer == "no" and scenes.clearly_not(rel, a, b)


def test_exists_answers_both_ways() -> None:
    answers = {scenes.sample(seed, kind="exists", lang="zh").answer for seed in range(40)}
    assert answers == {"有", "没有"}


EN_FOLLOW_UPS = {
    "total": re.compile(r"How many shapes are there\?"),
    "count": re.compile(r"How many (?:(?P<colour>\w+) )?(?P<noun>\w+) are there\?"),
    "exists": re.compile(r"Is there an? (?P<colour>\w+) (?P<kind>\w+)\?"),
    "colour": re.compile(r"What colou?r is the (?P<kind>\w+)\?"),
    "shape": re.compile(r"What shape is the (?P<colour>\w+) one\?"),
    "spatial": re.compile(
        r"Is the (?P<colour>\w+) (?P<kind>\w+) (?:to the )?(?P<rel>left|right|above|below)"
        r"(?: of)? the (?P<colour_b>\w+) (?P<kind_b>\w+)\?"
    ),
}
ZH_COLOUR = {zh: en for en, zh in scenes.COLOUR_ZH.items()}
ZH_SHAPE = {zh: en for en, zh in scenes.SHAPE_ZH.items()}


def true_answer(question: str, scene: scenes.Scene) -> str:
    """The answer to an English follow-up, read off the scene by the test itself."""
    for form, pattern in EN_FOLLOW_UPS.items():
        if m := pattern.fullmatch(question):
            return answer_of(form, m.groupdict(), scene)
    raise AssertionError(f"not a follow-up form: {question!r}")


def answer_of(form: str, g: dict[str, str | None], scene: scenes.Scene) -> str:
    shapes = scene.shapes
    if form == "total":
        return str(len(shapes))
    if form == "count":
        plural = {v: k for k, v in scenes.SHAPE_PLURAL.items()}
        kind = plural.get(g["noun"] or "")
        return str(
            sum(1 for s in shapes if kind in (None, s.kind) and g["colour"] in (None, s.colour))
        )
    if form == "exists":
        return (
            "yes" if any((s.kind, s.colour) == (g["kind"], g["colour"]) for s in shapes) else "no"
        )
    if form == "colour":
        (only,) = [s for s in shapes if s.kind == g["kind"]]
        return only.colour
    if form == "spatial":
        (a,) = [s for s in shapes if (s.kind, s.colour) == (g["kind"], g["colour"])]
        (b,) = [s for s in shapes if (s.kind, s.colour) == (g["kind_b"], g["colour_b"])]
        return spatial_truth(g["rel"] or "", a, b)
    (only,) = [s for s in shapes if s.colour == g["colour"]]
    return only.kind


def spatial_truth(rel: str, a: scenes.Shape, b: scenes.Shape) -> str:
    """ "yes" when A's extent lies wholly on the ``rel`` side of B's, "no" when A's centre
    lies on the other side of B's (by a quarter of B's radius); no third case is asked."""
    sign, coord = {"left": (-1, "cx"), "right": (1, "cx"), "above": (-1, "cy"), "below": (1, "cy")}[
        rel
    ]
    at_a, at_b = sign * getattr(a, coord), sign * getattr(b, coord)
    if at_a - a.r > at_b + b.r:
        return "yes"
    assert at_a < at_b - 0.25 * b.r, "an unclear relation was asked"
    return "no"


def test_follow_ups_are_true_of_the_earlier_image() -> None:
    items = [scenes.with_follow_up(scenes.sample(seed, "count", "en"), 3) for seed in range(300)]
    forms = {form: 0 for form in EN_FOLLOW_UPS}
    for item in items:
        assert item == scenes.with_follow_up(scenes.sample(item.seed, "count", "en"), 3)
        questions = [item.question, *(f.question for f in item.follow_ups)]
        assert len(set(questions)) == len(questions)  # nothing asked twice
        for question, answer, _ in item.follow_ups:
            assert answer == true_answer(question, item.scenes[0]), question
            forms[next(f for f, p in EN_FOLLOW_UPS.items() if p.fullmatch(question))] += 1
    assert min(forms.values()) > 60  # every form, at 3 turns of 300 samples
    answers = [a for item in items for q, a, _ in item.follow_ups if q.startswith("Is there")]
    assert 0.3 < answers.count("yes") / len(answers) < 0.7  # existence asked both ways


ZH_FOLLOW_UPS = {
    "total": re.compile(r"图中一共有几个图形？"),
    "count": re.compile(r"图中有几个(?:(?P<colour>\w+?)的)?(?P<noun>\w+)？"),
    "exists": re.compile(r"图中有(?P<colour>\w+?)的(?P<kind>\w+)吗？"),
    "colour": re.compile(r"(?P<kind>\w+)是什么颜色的？"),
    "shape": re.compile(r"(?P<colour>\w+)的图形是什么形状？"),
    "spatial": re.compile(
        r"(?P<colour>[^在]+?色)(?P<kind>[^在]+)在(?P<colour_b>.+?色)(?P<kind_b>.+)"
        r"的(?P<rel>左边|右边|上面|下面)吗？"
    ),
}
ZH_REL = {"左边": "left", "右边": "right", "上面": "above", "下面": "below"}
ZH_WORDS = {**ZH_COLOUR, **ZH_SHAPE, **ZH_REL, "有": "yes", "没有": "no", "是": "yes", "否": "no"}


def test_chinese_follow_ups_are_true_of_the_earlier_image() -> None:
    for seed in range(200):
        item = scenes.with_follow_up(scenes.sample(seed, "colour", "zh"), 3)
        for question, answer, _ in item.follow_ups:
            form, m = next((f, m) for f, p in ZH_FOLLOW_UPS.items() if (m := p.fullmatch(question)))
            g = {k: ZH_WORDS.get(v or "", v) for k, v in m.groupdict().items()}
            if form == "count":
                noun = g["noun"]
                g["noun"] = None if noun == "图形" else scenes.SHAPE_PLURAL[noun or ""]
            assert ZH_WORDS.get(answer, answer) == answer_of(form, g, item.scenes[0]), question


def test_one_follow_up_by_default() -> None:
    item = scenes.with_follow_up(scenes.sample(5, "colour", "zh"))
    assert len(item.follow_ups) == 1


def test_multi_image_samples_get_no_follow_up() -> None:
    item = scenes.sample(3, kind="multi_count")
    assert scenes.with_follow_up(item) is item


def test_held_out_extra_kinds_leave_the_grammar_questions_as_they_were() -> None:
    items = scenes.held_out(60, seed=3, kinds=scenes.ALL_KINDS)
    counts = {k: sum(s.kind == k for s in items) for k in scenes.ALL_KINDS}
    assert set(counts.values()) == {6}
    grammar = [s for s in items if s.kind in scenes.KINDS]
    assert grammar == scenes.held_out(48, seed=3)
    extra = [s for s in items if s.kind in scenes.EXTRA_KINDS]
    assert extra == scenes.held_out(12, seed=3, kinds=scenes.EXTRA_KINDS)
    assert {(s.kind, s.lang) for s in extra} == {
        (k, lang) for k in scenes.EXTRA_KINDS for lang in scenes.LANGS
    }
    assert all(s.seed >= scenes.HELD_OUT_BASE + scenes.EXTRA_OFFSET for s in extra)
