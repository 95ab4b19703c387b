"""The chat page's model picker: which offered model answers the next question.

Its first choice, "automatic", leaves the choice to the server: a follow-up goes to the
model its conversation follows, anything else to the default (see
:mod:`qwen_ui.models.routes`); any other choice names a model explicitly, and the
conversation follows it from then on. Hidden while one model is offered. Under it, the
chosen model's scope note when it declares one (``"scope"`` in its ``qwen_ui.json``, see
:mod:`qwen_ui.web.scope`).
"""

from __future__ import annotations

import logging
from typing import Any

import gradio as gr

from qwen_ui.lang import Lang
from qwen_ui.services import Services
from qwen_ui.settings import Settings
from qwen_ui.texts import t
from qwen_ui.web.scope import model_scope

log = logging.getLogger(__name__)

AUTO = ""  # the conversation's model, else the default


def build_model_picker(settings: Settings) -> gr.Dropdown:
    names = list(settings.model_refs)
    return gr.Dropdown(
        choices=_choices(names, "en"),
        value=AUTO,
        label=t("model", "en"),
        visible=len(names) > 1,
        interactive=True,
        elem_id="qwen-model",
    )


def picker_update(services: Services, lang: Lang, chosen: str = AUTO) -> Any:
    """The picker in ``lang`` with the models offered now and ``chosen``'s scope note."""
    names = services.models.names
    return gr.update(
        choices=_choices(names, lang),
        label=t("model", lang),
        info=scope_note(services, chosen or names[0], lang) or None,
        visible=len(names) > 1,
    )


def _choices(names: list[str], lang: Lang) -> list[tuple[str, str]]:
    return [(t("model_auto", lang, default=names[0]), AUTO), *((n, n) for n in names)]


def scope_note(services: Services, model: str, lang: Lang) -> str:
    """What ``model`` is for, in ``lang``, as it declares it; empty when it says nothing."""
    scope = model_scope(services.settings, model)
    return scope[lang] if scope else ""
