"""The UI's way to its words: the one zh/en table is :mod:`qwen_ui.texts` (shared with the
engine's stage labels), the language :mod:`qwen_ui.lang`'s; both are re-exported here.

:func:`page_lang` is where the page's language enters a Gradio handler: the browser
keeps it and sends it back with every event, so it may be any value."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qwen_ui.lang import LANGS, Lang, is_lang, negotiate
from qwen_ui.texts import TEXT, t

if TYPE_CHECKING:
    import gradio as gr

__all__ = ["LANGS", "TEXT", "Lang", "is_lang", "negotiate", "page_lang", "t"]


def page_lang(value: object, request: gr.Request, configured: str) -> Lang:
    """The language the page sent when it is a known one, else the default: ``configured``
    (QWEN_UI_LANGUAGE), else the event request's Accept-Language, else English."""
    return negotiate(request.headers.get("accept-language"), configured, value)
