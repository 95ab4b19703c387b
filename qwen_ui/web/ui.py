"""The Gradio Blocks UI: a thin client of the app's state (read at event time)."""

from __future__ import annotations

from typing import Any

import gradio as gr
from fastapi import FastAPI

from qwen_ui.engine.status import EngineState
from qwen_ui.web.i18n import LANGS, Lang, negotiate, t

PAGE_TITLE = "qwen-ui · Visual Q&A · 视觉问答"
LANG_CHOICES = [("English", "en"), ("中文", "zh")]


def status_markdown(app: FastAPI, lang: Lang) -> str:
    """What exists right now: the configured model, whether it is installed, engine state."""
    settings = app.state.settings
    engine = app.state.engine_status
    installed = app.state.store.is_installed(settings.model_id, settings.model_revision)
    state_text = t(f"engine_{engine.state.value}", lang)
    if engine.state is EngineState.FAILED and engine.reason:
        state_text += f": {engine.reason}"
    lines = [
        f"**{t('model', lang)}:** `{settings.model_id}` · {t('revision', lang)} "
        f"`{settings.model_revision}` · {t('installed' if installed else 'not_installed', lang)}",
        f"**{t('engine', lang)}:** {state_text}",
    ]
    if not getattr(app.state, "answering", False):
        lines.append(f"\n{t('no_engine', lang)}")
    return "\n\n".join(lines)


def build_ui(app: FastAPI) -> gr.Blocks:
    with gr.Blocks(title=PAGE_TITLE, analytics_enabled=False) as blocks:
        lang = gr.State("en")
        with gr.Row(elem_classes="qwen-header"):
            header = gr.Markdown(_header("en"))
            picker = gr.Radio(LANG_CHOICES, value="en", label=t("language", "en"), scale=0)
        status = gr.Markdown(elem_classes="qwen-status", elem_id="qwen-status")
        chat = gr.Chatbot(label=t("chat", "en"), elem_id="qwen-chat", height=420)
        question = gr.MultimodalTextbox(
            label=t("question", "en"),
            placeholder=t("question_placeholder", "en"),
            file_types=["image"],
            file_count="multiple",
            elem_id="qwen-question",
            interactive=True,
        )
        texts: list[Any] = [header, picker, status, chat, question]

        def on_load(request: gr.Request) -> tuple[Any, ...]:
            chosen = negotiate(
                request.headers.get("accept-language"), app.state.settings.language
            )
            if "lang" in request.query_params and request.query_params["lang"] in LANGS:
                chosen = request.query_params["lang"]
            return (chosen, *_relabel(app, chosen))

        def on_pick(chosen: Lang) -> tuple[Any, ...]:
            return (chosen, *_relabel(app, chosen))

        def on_submit(message: dict[str, Any], current: Lang) -> Any:
            raise gr.Error(t("no_engine", current))

        blocks.load(on_load, None, [lang, *texts], api_visibility="private")
        picker.input(on_pick, picker, [lang, *texts], api_visibility="private")
        question.submit(on_submit, [question, lang], None, api_visibility="undocumented")
    return blocks


def _header(lang: Lang) -> str:
    return f"# {t('title', lang)}\n{t('tagline', lang)}"


def _relabel(app: FastAPI, lang: Lang) -> tuple[Any, ...]:
    return (
        gr.update(value=_header(lang)),
        gr.update(value=lang, label=t("language", lang)),
        gr.update(value=status_markdown(app, lang)),
        gr.update(label=t("chat", lang)),
        gr.update(label=t("question", lang), placeholder=t("question_placeholder", lang)),
    )
