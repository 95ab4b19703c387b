"""The page's accessibility script gets its words from the one text table, in both
languages (the browser tests in ``test_a11y_browser.py`` check what it does)."""

from __future__ import annotations

import json
import re

from qwen_ui.lang import LANGS
from qwen_ui.texts import TEXT
from qwen_ui.web.a11y import WORDS, a11y_js


def _words(script: str) -> dict[str, dict[str, str]]:
    match = re.search(r"\}\)\((\{.*\})\)$", script, re.S)
    assert match, script[-300:]
    found: dict[str, dict[str, str]] = json.loads(match.group(1))
    return found


def test_script_is_a_function_called_with_the_table_s_words() -> None:
    script = a11y_js()
    assert script.startswith("() => ((words) => {")
    words = _words(script)
    assert set(words) == set(LANGS)
    for lang in LANGS:
        assert words[lang] == {key: TEXT[key][lang] for key in WORDS}


def test_every_icon_label_and_alt_text_is_in_the_words() -> None:
    assert {"question", "image_alt", "image_alt_of", "progress", "label_attach"} <= set(WORDS)
    script = a11y_js()
    for key in re.findall(r'"(label_\w+)"', script.split("})({")[0]):
        assert key in WORDS, key
