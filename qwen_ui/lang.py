"""The two languages of qwen-ui (English and Chinese) and the one way a request's
language is chosen: an explicit choice (a form field, a query parameter, the page's
picker), else the configured language (``QWEN_UI_LANGUAGE``), else the browser's
``Accept-Language``, else English."""

from __future__ import annotations

from typing import Literal, TypeGuard

Lang = Literal["en", "zh"]
LANGS: tuple[Lang, ...] = ("en", "zh")


def is_lang(value: object) -> TypeGuard[Lang]:
    return value in LANGS


def negotiate(accept_language: str | None, configured: str = "auto", chosen: object = None) -> Lang:
    """The request's language (see the module's docstring for the order); a ``chosen``
    value that is not a known language (the browser sends anything) is no choice."""
    for value in (chosen, configured):
        if is_lang(value):
            return value
    for lang, _q in _parse_accept(accept_language or ""):
        primary = lang.split("-")[0].lower()
        if is_lang(primary):
            return primary
    return "en"


def _parse_accept(header: str) -> list[tuple[str, float]]:
    items = []
    for part in header.split(","):
        lang, _, params = part.strip().partition(";")
        quality = 1.0
        if params.strip().startswith("q="):
            try:
                quality = float(params.strip()[2:])
            except ValueError:
                quality = 0.0
        if lang:
            items.append((lang, quality))
    return sorted(items, key=lambda item: -item[1])
