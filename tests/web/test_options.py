"""/api/v1/ask's form options (web/options.py): text in, AskOptions or bad_option out."""

from __future__ import annotations

from pathlib import Path

import pytest

from qwen_ui.engine.errors import SEED_MAX, BadOption
from qwen_ui.settings import Settings
from qwen_ui.web.options import ask_lang, ask_options


@pytest.fixture
def settings(home: Path) -> Settings:
    return Settings(home=home, max_new_tokens_limit=512)


def test_valid_options_are_parsed(settings: Settings) -> None:
    options = ask_options(settings, " 64 ", "0.7", "1", str(SEED_MAX))
    assert (options.max_new_tokens, options.temperature, options.top_p) == (64, 0.7, 1.0)
    assert options.seed == SEED_MAX


def test_absent_or_empty_options_take_the_defaults(settings: Settings) -> None:
    options = ask_options(settings, None, "", None, " ")
    assert (options.max_new_tokens, options.temperature, options.top_p, options.seed) == (
        None,
        None,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_new_tokens", "513"),
        ("max_new_tokens", "0"),
        ("max_new_tokens", "1.5"),
        ("max_new_tokens", "²"),
        ("temperature", "2.01"),
        ("temperature", "-inf"),
        ("top_p", "0"),
        ("top_p", "nan"),
        ("seed", str(SEED_MAX + 1)),
        ("seed", "9" * 40),
        ("seed", "-1"),
    ],
)
def test_bad_values_name_their_option(settings: Settings, field: str, value: str) -> None:
    given = {"max_new_tokens": None, "temperature": None, "top_p": None, "seed": None}
    given[field] = value
    with pytest.raises(BadOption) as raised:
        ask_options(settings, **given)
    assert raised.value.code == "bad_option"
    assert field in raised.value.message("en") and field in raised.value.message("zh")


def test_lang_is_en_zh_or_negotiated() -> None:
    assert ask_lang("zh") == "zh"
    assert ask_lang(None) is None and ask_lang("") is None
    with pytest.raises(BadOption):
        ask_lang("fr")
