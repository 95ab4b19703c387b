"""The chat page's model picker: which offered model answers the next question.

Its first choice, "automatic", leaves the choice to the server: a follow-up goes to the
model its conversation follows, anything else to the default (see
:mod:`qwen_ui.models.routes`); any other choice names a model explicitly, and the
conversation follows it from then on. Hidden while one model is offered. Under it, the
chosen model's scope note when it has one: the shipped demo's, or ``"scope": {"en": ...,
"zh": ...}`` in a model's ``qwen_ui.json``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import gradio as gr

from qwen_ui.demo.examples import NOTICE as DEMO_NOTICE
from qwen_ui.errors import QwenUIError
from qwen_ui.lang import Lang
from qwen_ui.models.refs import ModelRef
from qwen_ui.services import Services
from qwen_ui.settings import DEMO_MODEL_ID, Settings
from qwen_ui.texts import t

log = logging.getLogger(__name__)

AUTO = ""  # the conversation's model, else the default
FACTS = "qwen_ui.json"


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
    """What ``model`` is for, in ``lang``; empty when it says nothing."""
    try:
        ref = ModelRef.parse(model)
    except ValueError:
        return ""
    if ref.model_id == DEMO_MODEL_ID:
        return DEMO_NOTICE[lang]
    try:
        snapshot = services.store.resolve(ref.model_id, ref.revision)
        facts = json.loads((Path(snapshot.path) / FACTS).read_text("utf-8"))
    except (QwenUIError, OSError, ValueError):
        return ""
    scope = facts.get("scope") if isinstance(facts, dict) else None
    note = scope.get(lang) if isinstance(scope, dict) else None
    return note if isinstance(note, str) else ""
