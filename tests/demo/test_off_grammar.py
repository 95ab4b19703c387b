"""Questions outside the grammar: one refusal per language; held-out questions partly
from templates and vocabulary never trained on."""

from __future__ import annotations

import random

from qwen_ui.demo import off_grammar, scenes
from qwen_ui.demo.off_grammar import REFUSAL, TRAIN, UNSEEN


def grammar_questions() -> set[str]:
    return {scenes.sample(seed, kind).question for seed in range(3000) for kind in scenes.KINDS}


def test_every_refusal_is_the_one_of_the_question_language() -> None:
    for seed in range(300):
        item = scenes.sample(seed, "off_grammar")
        assert item.answer == REFUSAL[item.lang]
        has_cjk = any("\u4e00" <= ch <= "\u9fff" for ch in item.question)
        has_kana = any("\u3040" <= ch <= "\u30ff" for ch in item.question)
        if item.lang == "zh":
            assert has_cjk and not has_kana
        else:
            assert not has_cjk or has_kana  # English, another language, or Japanese
        assert 1 <= len(item.scenes) <= 2


def test_the_refusal_names_two_questions_the_model_answers() -> None:
    asked = grammar_questions()
    for lang in scenes.LANGS:
        quoted = REFUSAL[lang].split("“")[1:]
        examples = [q.split("”")[0] for q in quoted]
        assert len(examples) == 2 and all(q in asked for q in examples), examples


def test_no_off_grammar_question_is_a_grammar_question() -> None:
    asked = grammar_questions()
    for pool in (TRAIN, UNSEEN):
        rng = random.Random(0)
        for lang in ("en", "zh"):
            for _ in range(200):
                text, _ = off_grammar.question(rng, lang, pool)  # type: ignore[arg-type]
                assert text not in asked


def test_training_seeds_never_draw_the_unseen_templates() -> None:
    unseen = {*UNSEEN.en, *UNSEEN.zh, *UNSEEN.foreign}
    fixed_unseen = {t for t in unseen if "{" not in t}
    trained = {scenes.sample(seed, "off_grammar").question for seed in range(2000)}
    assert not trained & fixed_unseen
    assert not any(o in q for q in trained for o, _ in UNSEEN.objects_en)
    held = [s.question for s in scenes.held_out(400, 0, ("off_grammar",))]
    from_unseen = [
        q
        for q in held
        if q in fixed_unseen
        or any(o in q for o, _ in UNSEEN.objects_en)
        or any(o in q for o in UNSEEN.objects_zh)
    ]
    assert 0.2 * len(held) < len(from_unseen) < 0.7 * len(held)
