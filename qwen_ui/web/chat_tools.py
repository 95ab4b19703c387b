"""The chat's box switch and export links, and their Gradio events (the page itself is
:mod:`qwen_ui.web.ui`; it places these two components and calls :func:`wire`).

- "Show boxes on images" (a checkbox under the chat): shows or hides the rectangles on
  every located image of the chat (:func:`qwen_ui.web.chat_boxes.with_boxes_shown`).
- After each answer, the answer is drawn from the conversation's last turn: its labels in
  the text and its located images (:func:`qwen_ui.web.chat_boxes.draw_last_answer`).
- The sidebar's export links download the open conversation from
  ``GET /api/v1/conversations/{id}/export`` (the page's login session is the caller).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import gradio as gr
from fastapi import FastAPI

from qwen_ui.settings import Settings
from qwen_ui.web.auth import principal_from_gradio
from qwen_ui.web.chat import normalize
from qwen_ui.web.chat_boxes import Messages, draw_last_answer, with_boxes_shown
from qwen_ui.web.history import open_conversation, store_of
from qwen_ui.web.i18n import Lang, page_lang, t

SHOW_BOXES_ID = "qwen-show-boxes"
EXPORT_ID = "qwen-export"


def show_boxes_box(lang: Lang = "en") -> gr.Checkbox:
    return gr.Checkbox(True, label=t("show_boxes", lang), elem_id=SHOW_BOXES_ID, scale=0)


def export_links(settings: Settings, lang: Lang = "en") -> gr.HTML:
    return gr.HTML(export_html(settings, "", lang), elem_id=EXPORT_ID)


def export_html(settings: Settings, conversation_id: str | None, lang: Lang) -> str:
    """Links that download the conversation (zip, JSON), or a note while there is none."""
    title = f'<span class="qwen-export-title">{t("export", lang)}</span>'
    if not conversation_id:
        return f'{title} <span class="qwen-export-none">{t("export_none", lang)}</span>'
    base = f"{settings.root_path}/api/v1/conversations/{quote(conversation_id, safe='')}/export"
    links = [
        f'<a class="qwen-export-{fmt}" href="{html.escape(base)}?format={fmt}&amp;lang={lang}" '
        f"download>{t(f'export_{fmt}', lang)}</a>"
        for fmt in ("zip", "json")
    ]
    return f"{title} " + " · ".join(links)


def wire(app: FastAPI, settings: Settings, page: Any, *, answered: Sequence[Any]) -> None:
    """The events of ``page`` (:class:`qwen_ui.web.ui.Page`): the switch, the drawing
    after each answer (``answered``: every event that answers a question, to chain on),
    the links following the open conversation."""
    show_boxes, links, chat = page.show_boxes, page.export_links, page.chat
    conversation, lang = page.conversation, page.lang

    async def on_show(show: bool, shown: Messages | None, request: gr.Request) -> Any:
        principal = principal_from_gradio(request)
        return with_boxes_shown(_normalized(shown), show, principal.tenant)

    async def on_answered(
        show: bool,
        shown: Messages | None,
        conversation_id: str,
        current: object,
        request: gr.Request,
    ) -> Any:
        store = store_of(app)
        found = await open_conversation(app, principal_from_gradio(request), conversation_id)
        if store is None or found is None:
            return gr.update()
        lang = page_lang(current, request, settings.language)
        drawn = await draw_last_answer(store, found, _normalized(shown), lang, show)
        return gr.update() if drawn is None else drawn

    def on_conversation(
        conversation_id: str, current: object, request: gr.Request
    ) -> dict[Any, Any]:
        # on load the conversation may be restored before the language is chosen ("")
        lang = page_lang(current, request, settings.language)
        return {
            links: export_html(settings, conversation_id, lang),
            show_boxes: gr.update(label=t("show_boxes", lang)),
        }

    # the chat is an output of both: no progress shown on it ("Loading content" over the
    # last message while they run)
    private: dict[str, Any] = {"api_visibility": "private", "show_progress": "hidden"}
    show_boxes.input(on_show, [show_boxes, chat], [chat], concurrency_limit=None, **private)
    for event in answered:
        event.then(on_answered, [show_boxes, chat, conversation, lang], [chat], **private)
    for changed in (conversation, lang):
        changed.change(on_conversation, [conversation, lang], [links, show_boxes], **private)


def _normalized(shown: Messages | None) -> Messages:
    return normalize(shown)
