"""The one language negotiation: an explicit choice, the configured language, the
browser's Accept-Language, English."""

from __future__ import annotations

import pytest

from qwen_ui.lang import is_lang, negotiate


@pytest.mark.parametrize(
    ("header", "configured", "chosen", "expected"),
    [
        ("zh-CN", "auto", None, "zh"),
        ("zh-CN", "en", None, "en"),  # the configured language beats the browser
        ("zh-CN", "en", "zh", "zh"),  # an explicit choice beats both
        ("en", "auto", "fr", "en"),  # an unknown choice is ignored
        ("fr, de;q=0.5", "auto", "", "en"),
        (None, "auto", None, "en"),
        ("en;q=0.2,zh-TW;q=0.8", "auto", None, "zh"),
    ],
)
def test_negotiate(header: str | None, configured: str, chosen: str | None, expected: str) -> None:
    assert negotiate(header, configured, chosen) == expected


def test_is_lang() -> None:
    assert is_lang("zh") and is_lang("en")
    assert not is_lang("ZH") and not is_lang(None) and not is_lang("auto")


def test_a_chosen_value_of_any_type_that_is_no_language_is_no_choice() -> None:
    """The page's language comes back from the browser as any JSON value."""
    for chosen in (42, {"en": "zh"}, ["zh"], None, "ZH", "auto"):
        assert negotiate("zh-CN", "en", chosen) == "en"
        assert negotiate("zh-CN", "auto", chosen) == "zh"
