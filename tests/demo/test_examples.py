"""UI examples from the grammar."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from qwen_ui.demo import scenes
from qwen_ui.demo.examples import EXAMPLE_KINDS, NOTICE, examples


def test_one_example_per_type_in_each_language(tmp_path: Path) -> None:
    for lang in scenes.LANGS:
        found = examples(tmp_path, lang)
        assert [e.kind for e in found] == list(EXAMPLE_KINDS) == [*scenes.KINDS, "grounding"]
        for e in found:
            for path in e.images:
                with Image.open(path) as image:
                    assert image.size[0] >= 160
            assert any("\u4e00" <= c <= "\u9fff" for c in e.question) == (lang == "zh")
    assert set(NOTICE) == {"en", "zh"}


def test_the_scope_note_is_one_line_per_language_naming_every_shape() -> None:
    from qwen_ui.demo.examples import SCOPE

    assert set(SCOPE) == set(scenes.LANGS)
    assert all("\n" not in line for line in SCOPE.values())
    assert all(shape in SCOPE["en"] for shape in scenes.SHAPE_PLURAL.values())
    assert all(shape in SCOPE["zh"] for shape in scenes.SHAPE_ZH.values())
