"""The generation options of ``POST /api/v1/ask``, from form text to :class:`AskOptions`
(and the same integer check for other routes' options, e.g. the OSS page size).

Every field arrives as text and is checked here: a value that is not a number, is out of
range, or is not one of the choices is a 400 ``bad_option`` that names the option, never
a 500 later in the engine.
"""

from __future__ import annotations

import math
import re

from qwen_ui.engine.engine import AskOptions
from qwen_ui.engine.errors import SEED_MAX, BadOption
from qwen_ui.settings import Settings
from qwen_ui.web.i18n import LANGS

INTEGER = re.compile(r"[+-]?[0-9]+")


class BadChoice(BadOption):
    en = "Option {name} must be one of: {choices}."
    zh = "选项 {name} 必须是以下之一：{choices}。"


def ask_options(
    settings: Settings,
    max_new_tokens: str | None,
    temperature: str | None,
    top_p: str | None,
    seed: str | None,
) -> AskOptions:
    return AskOptions(
        max_new_tokens=integer_option(
            "max_new_tokens", max_new_tokens, 1, settings.max_new_tokens_limit
        ),
        temperature=_number("temperature", temperature, 0.0, 2.0, open_low=False),
        top_p=_number("top_p", top_p, 0.0, 1.0, open_low=True),
        seed=integer_option("seed", seed, 0, SEED_MAX),
    )


def ask_lang(value: str | None) -> str | None:
    """An explicit answer language (``en``, ``zh``), or None to negotiate one."""
    if value is None or value == "":
        return None
    if value not in LANGS:
        raise BadChoice(name="lang", choices=", ".join(LANGS))
    return value


def integer_option(name: str, text: str | None, low: int, high: int) -> int | None:
    """``text`` as an integer in ``low..high`` (None when empty), else ``bad_option``."""
    if text is None or text.strip() == "":
        return None
    digits = text.strip()
    if len(digits) > 32 or not INTEGER.fullmatch(digits):
        raise BadOption(name=name, low=low, high=high)
    value = int(digits)
    if not low <= value <= high:
        raise BadOption(name=name, low=low, high=high)
    return value


def _number(name: str, text: str | None, low: float, high: float, open_low: bool) -> float | None:
    if text is None or text.strip() == "":
        return None
    try:
        value = float(text.strip()) if len(text) <= 32 else math.nan
    except ValueError:
        value = math.nan
    below = value <= low if open_low else value < low
    if math.isnan(value) or below or value > high:
        raise BadOption(name=name, low=f"{low:g}", high=f"{high:g}")
    return value
