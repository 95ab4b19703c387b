"""The page's accessibility script: names for Gradio's icon buttons and the question box,
alt text for chat and example images, the document's language, all in the page's
language. The script is ``static/a11y.js``; its words come from :mod:`qwen_ui.texts`."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from qwen_ui.lang import LANGS
from qwen_ui.texts import TEXT

# the table's keys the script uses
WORDS = (
    "question",
    "chat",
    "progress",
    "image_alt",
    "image_alt_of",
    *(key for key in TEXT if key.startswith("label_")),
)


@cache
def _source() -> str:
    return resources.files("qwen_ui.web").joinpath("static/a11y.js").read_text("utf-8")


def a11y_js() -> str:
    """The script as a Gradio ``js=`` function: ``static/a11y.js`` called with the words."""
    words = {lang: {key: TEXT[key][lang] for key in WORDS} for lang in LANGS}
    body = "\n".join(line for line in _source().splitlines() if not line.startswith("//"))
    return f"() => ({body.strip()})({json.dumps(words, ensure_ascii=False)})"
