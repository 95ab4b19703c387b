"""The one zh/en text table: complete in both languages, the same placeholders in each,
every stage labelled, and no second table hiding elsewhere in the package."""

from __future__ import annotations

import ast
import string
import typing
from pathlib import Path

import pytest

import qwen_ui
from qwen_ui.engine.events import Stage, StageName
from qwen_ui.lang import LANGS
from qwen_ui.texts import TEXT, t

PACKAGE = Path(qwen_ui.__file__).parent
# modules allowed to hold zh/en text of their own: the table itself, and the demo model's
# own words (grammar, scope, refusal), which are what the model was trained on
OWN_WORDS = {"texts.py", "demo"}


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


@pytest.mark.parametrize("key", sorted(TEXT))
def test_every_key_has_both_languages_with_the_same_placeholders(key: str) -> None:
    entry = TEXT[key]
    assert set(entry) == set(LANGS)
    assert all(entry[lang].strip() or key.startswith("stage_") for lang in LANGS)
    assert _fields(entry["en"]) == _fields(entry["zh"])


def test_t_formats_only_when_given_parameters() -> None:
    assert t("n_images", "en") == "{n} images"
    assert t("n_images", "zh", n=3) == "3 张图片"


@pytest.mark.parametrize("stage", typing.get_args(StageName))
def test_every_stage_is_labelled_in_both_languages(stage: StageName) -> None:
    labels = {lang: Stage(stage, index=1, total=2, ahead=1).label(lang) for lang in LANGS}
    assert labels["en"] != labels["zh"]
    assert "{" not in labels["en"] + labels["zh"]


def test_queued_stage_shows_the_wait_in_the_table_s_words() -> None:
    stage = Stage("queued", ahead=2, wait_s=7.4)
    assert stage.label("en") == "Waiting in line: position 3, about 7 s"  # 2 ahead
    assert stage.label("zh") == "排队中：第 3 位，约 7 秒"


def _zh_tables(path: Path) -> list[int]:
    """Lines of dict literals in ``path`` keyed by both "en" and "zh"."""
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if {"en", "zh"} <= keys:
                found.append(node.lineno)
    return found


def test_no_second_text_table_in_the_package() -> None:
    strays = {}
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] in OWN_WORDS:
            continue
        if lines := _zh_tables(path):
            strays[str(relative)] = lines
    assert strays == {}
