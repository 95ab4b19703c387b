"""The Gradio Blocks UI: a thin client of the engine (on the app's services).

Images and a question go in through a ``MultimodalTextbox``; the answer streams into a
``Chatbot`` under a collapsible stage message (``metadata.status`` pending → done) that
names the stage being worked on, with a progress bar beside it. Stop cancels the
generator, which closes the engine's iterator and so the work on the worker thread.
"""

from __future__ import annotations

import html
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import gradio as gr
from fastapi import FastAPI

from qwen_ui.auth.principal import Principal
from qwen_ui.demo.examples import NOTICE as DEMO_NOTICE
from qwen_ui.demo.examples import examples as demo_examples
from qwen_ui.engine.engine import AskRequest
from qwen_ui.engine.events import Done, Event, Failed, Stage, Token
from qwen_ui.engine.status import EngineState
from qwen_ui.errors import QwenUIError
from qwen_ui.services import maybe_services, services_of
from qwen_ui.settings import Settings
from qwen_ui.web.asking import ask_as
from qwen_ui.web.auth import principal_from_gradio
from qwen_ui.web.history import (
    choices,
    escape_markdown_html,
    image_message,
    messages,
    open_conversation,
    store_of,
)
from qwen_ui.web.i18n import LANGS, Lang, negotiate, t
from qwen_ui.web.oss_panel import build_oss_panel

log = logging.getLogger(__name__)

PAGE_TITLE = "qwen-ui · Visual Q&A · 视觉问答"
LANG_CHOICES = [("English", "en"), ("中文", "zh")]
Messages = list[dict[str, Any]]
_BAR = "height:6px;border-radius:3px;overflow:hidden;background:var(--border-color-primary)"
_FILL = "height:100%;background:var(--color-accent);transition:width .2s"


def status_markdown(app: FastAPI, lang: Lang) -> str:
    """What exists right now: the configured model, whether it is installed, engine state."""
    services = services_of(app)
    settings, engine = services.settings, services.status
    installed = services.store.is_installed(settings.model_id, settings.model_revision)
    state_text = t(f"engine_{engine.state.value}", lang)
    if engine.state is EngineState.FAILED and engine.reason:
        state_text += f": {engine.reason}"
    lines = [
        f"**{t('model', lang)}:** `{settings.model_id}` · {t('revision', lang)} "
        f"`{settings.model_revision}` · {t('installed' if installed else 'not_installed', lang)}",
        f"**{t('engine', lang)}:** {state_text}",
    ]
    if settings.engine == "openai":  # answered by a remote model server
        host = urlsplit(settings.remote_base_url).netloc
        lines[0] = f"**{t('model', lang)}:** `{settings.remote_model}` · {host}"
    if not services.answering:
        lines.append(f"\n{t('no_engine', lang)}")
    return "\n\n".join(lines)


def progress_html(fraction: float, label: str = "") -> str:
    percent = max(0.0, min(100.0, fraction * 100))
    return (
        f'<div class="qwen-progress" role="progressbar" aria-valuenow="{percent:.0f}" '
        f'aria-valuemin="0" aria-valuemax="100" title="{label}" style="{_BAR}">'
        f'<div class="qwen-progress-fill" style="width:{percent:.1f}%;{_FILL}"></div></div>'
    )


NEAR_LIMIT = 0.8  # the character count shows from this share of the limit on
COUNTER_EMPTY = '<div class="qwen-counter" aria-live="polite"></div>'


def counter_js(settings: Settings) -> str:
    """A browser script, run once on load, that redraws the counter under the question box
    on every keystroke and attachment: "images n/8" while images are attached, "characters
    n/4,000" from ``NEAR_LIMIT`` of the limit on, red above a limit. It reads the box from
    the page, so counting makes no request to the server."""
    words = {code: [t("counter_images", code), t("counter_chars", code)] for code in LANGS}
    return f"""() => {{
  const all = {json.dumps(words)};
  const maxImages = {settings.max_images}, maxChars = {settings.max_question_chars};
  const span = (word, n, max) => `<span class="qwen-count${{n > max ? " over" : ""}}">` +
    `${{word}} ${{n.toLocaleString("en-US")}}/${{max.toLocaleString("en-US")}}</span>`;
  const draw = () => {{
    const box = document.querySelector("#qwen-question");
    const out = document.querySelector("#qwen-counter .qwen-counter");
    if (!box || !out) return;
    const lang = document.querySelector("#qwen-lang input:checked")?.value;
    const words = all[lang] || all.en;
    const files = box.querySelectorAll(".thumbnail-item").length;
    const chars = [...(box.querySelector("textarea")?.value || "")].length;
    const parts = [];
    if (files) parts.push(span(words[0], files, maxImages));
    if (chars >= {NEAR_LIMIT} * maxChars) parts.push(span(words[1], chars, maxChars));
    const html = parts.join(" · ");
    if (out.innerHTML !== html) out.innerHTML = html;  // no change, no new mutation
  }};
  document.addEventListener("input", draw, true);
  new MutationObserver(draw).observe(document.body, {{ subtree: true, childList: true }});
  draw();
}}"""


def logout_html(settings: Settings, lang: Lang, who: str = "") -> str:
    """Who is logged in (``tenant/user``) and a link to the logout page (a confirmation
    form: logging out is a CSRF-checked POST)."""
    shown = (
        f'<span class="qwen-who">{t("logged_in_as", lang)} <strong>{html.escape(who)}</strong>'
        "</span> · "
        if who
        else ""
    )
    link = f'<a class="qwen-logout" href="{settings.root_path}/logout">{t("logout", lang)}</a>'
    return shown + link


@dataclass
class Page:
    """The page's components by role: every handler returns its updates keyed by them."""

    lang: Any  # gr.BrowserState: the chosen language, kept in the browser
    conversation: Any  # gr.BrowserState: the open conversation's id
    history: gr.Radio
    title_box: gr.Textbox
    rename: gr.Button
    delete: gr.Button
    header: gr.Markdown
    logout: gr.HTML
    picker: gr.Radio
    status: gr.Markdown
    demo_note: gr.Markdown
    chat: gr.Chatbot
    progress: gr.HTML
    question: gr.MultimodalTextbox
    stop: gr.Button
    new_chat: gr.Button
    examples: dict[str, Any] = field(default_factory=dict)  # per language (demo model)

    @property
    def texts(self) -> list[Any]:
        """What a language change relabels."""
        fixed = [self.header, self.picker, self.status, self.chat, self.question, self.stop]
        fixed += [self.new_chat, self.logout, self.demo_note, *self.examples.values()]
        return [*fixed, self.history, self.title_box, self.rename, self.delete]

    @property
    def listed(self) -> list[Any]:
        """The sidebar's list and the open conversation's title."""
        return [self.history, self.title_box]

    @property
    def shown(self) -> list[Any]:
        """What opening a conversation redraws."""
        return [self.chat, self.conversation, self.progress, *self.listed]

    @property
    def answered(self) -> list[Any]:
        """What the submit handler updates while a question is answered."""
        return [self.chat, self.question, self.progress, self.conversation, self.status]

    def of(self, view: ChatView) -> dict[Any, Any]:
        return {
            self.chat: view.chat,
            self.question: view.box,
            self.progress: view.progress,
            self.conversation: view.conversation,
            self.status: view.status,
        }


@dataclass(frozen=True)
class ChatView:
    """One update of the chat while a question is answered, by name; ``gr.update()``
    (or a value equal to it) leaves a component as it is."""

    chat: Any  # the messages
    box: Any  # the question box
    progress: str  # the progress bar's HTML
    conversation: str | None  # the conversation's id
    status: Any  # the status line


def build_ui(app: FastAPI, settings: Settings) -> gr.Blocks:
    with gr.Blocks(title=PAGE_TITLE, analytics_enabled=False) as blocks:
        page = _layout(app, settings, blocks)
        _wire(blocks, page, Handlers(app, settings, page), settings)
    return blocks  # type: ignore[no-any-return]


def _layout(app: FastAPI, settings: Settings, blocks: gr.Blocks) -> Page:
    """The components, in page order."""
    # kept in the browser (localStorage), so a reload restores both
    lang = gr.BrowserState("", storage_key="qwen-ui-lang")
    conversation = gr.BrowserState("", storage_key="qwen-ui-conversation")
    with gr.Sidebar(label=t("history", "en"), open=False, elem_id="qwen-sidebar"):
        history = gr.Radio([], label=t("history", "en"), elem_id="qwen-history")
        title_box = gr.Textbox(label=t("title_label", "en"), elem_id="qwen-title")
        with gr.Row():
            rename = gr.Button(t("rename", "en"), elem_id="qwen-rename", size="sm")
            delete = gr.Button(t("delete", "en"), elem_id="qwen-delete", variant="stop", size="sm")
    with gr.Row(elem_classes="qwen-header"):
        header = gr.Markdown(_header("en"))
        logout = gr.HTML(logout_html(settings, "en"), elem_id="qwen-logout", scale=0)
        picker = gr.Radio(
            LANG_CHOICES, value="en", label=t("language", "en"), scale=0, elem_id="qwen-lang"
        )
    status = gr.Markdown(elem_classes="qwen-status", elem_id="qwen-status")
    demo_note = gr.Markdown(visible=settings.is_demo_model, elem_id="qwen-demo-note")
    chat = gr.Chatbot(
        label=t("chat", "en"),
        elem_id="qwen-chat",
        height=460,
        # no "share" (it needs Hugging Face Spaces) and no "copy all" (it copies the
        # server's temp-file URLs); each message keeps its own copy button
        buttons=["copy"],
    )
    progress = gr.HTML(progress_html(0.0), elem_id="qwen-progress")
    question = _question_box(settings)
    gr.HTML(COUNTER_EMPTY, elem_id="qwen-counter")
    with gr.Row():
        # shown only while an answer runs, when the box's Send button is hidden
        stop = gr.Button(
            t("stop", "en"), elem_id="qwen-stop", variant="stop", scale=0, visible=False
        )
        new_chat = gr.Button(t("new_chat", "en"), elem_id="qwen-new-chat", scale=0)
    build_oss_panel(app, blocks, question)
    examples = _demo_examples(settings, question) if settings.is_demo_model else {}
    examples = {code: examples.get(code, gr.Column(visible=False)) for code in LANGS}
    return Page(
        lang=lang,
        conversation=conversation,
        history=history,
        title_box=title_box,
        rename=rename,
        delete=delete,
        header=header,
        logout=logout,
        picker=picker,
        status=status,
        demo_note=demo_note,
        chat=chat,
        progress=progress,
        question=question,
        stop=stop,
        new_chat=new_chat,
        examples=examples,
    )


def _question_box(settings: Settings) -> gr.MultimodalTextbox:
    return gr.MultimodalTextbox(
        label=t("question", "en"),
        placeholder=t("question_placeholder", "en"),
        # no client-side type filter: Gradio's own check shows an English toast (twice)
        # and the question is sent anyway; the server refuses any non-image with one
        # message in the page's language and gives the text and files back
        file_count="multiple",
        # Gradio turns pasted text longer than this into a .txt attachment (1,000 by
        # default): a long question must stay text, to be counted and refused as such
        max_plain_text_length=10 * settings.max_question_chars,
        elem_id="qwen-question",
        interactive=True,
    )


class Handlers:
    """The page's event handlers; each returns (or yields) updates keyed by component."""

    def __init__(self, app: FastAPI, settings: Settings, page: Page) -> None:
        self.app = app
        self.settings = settings
        self.page = page
        self.controls = Controls()

    async def listing(
        self, request: gr.Request, chosen: Lang, conversation_id: str | None
    ) -> dict[Any, Any]:
        """The sidebar: the principal's conversations, the open one chosen."""
        principal = principal_from_gradio(request)
        found = await open_conversation(self.app, principal, conversation_id)
        return {
            self.page.history: gr.update(
                choices=await choices(self.app, principal, chosen),
                value=found.id if found else None,
            ),
            self.page.title_box: gr.update(value=found.display_title if found else ""),
        }

    async def showing(
        self, request: gr.Request, chosen: Lang, conversation_id: str | None
    ) -> dict[Any, Any]:
        """The chat drawn from the server's conversation, and the sidebar."""
        principal = principal_from_gradio(request)
        found = await open_conversation(self.app, principal, conversation_id)
        drawn = await messages(self.app, found, chosen) if found else []
        return {
            self.page.chat: gr.update(value=drawn),
            self.page.conversation: found.id if found else "",
            self.page.progress: progress_html(0.0),
            **await self.listing(request, chosen, conversation_id),
        }

    def relabelled(self, request: gr.Request, chosen: Lang) -> dict[Any, Any]:
        who = principal_from_gradio(request).label
        return {self.page.lang: chosen, **_relabel(self.app, self.page, chosen, who)}

    async def on_load(
        self, stored_lang: str, stored_conversation: str, request: gr.Request
    ) -> dict[Any, Any]:
        chosen = negotiate(request.headers.get("accept-language"), self.settings.language)
        if stored_lang in LANGS:
            chosen = stored_lang  # type: ignore[assignment]
        if request.query_params.get("lang") in LANGS:
            chosen = request.query_params["lang"]  # type: ignore[assignment]
        shown = await self.showing(request, chosen, stored_conversation)
        return merged(self.relabelled(request, chosen), shown)

    async def on_pick(
        self, chosen: Lang, conversation_id: str, request: gr.Request
    ) -> dict[Any, Any]:
        listed = await self.listing(request, chosen, conversation_id)
        return merged(self.relabelled(request, chosen), listed)

    async def on_listing(
        self, chosen: Lang, conversation_id: str, request: gr.Request
    ) -> dict[Any, Any]:
        return await self.listing(request, chosen, conversation_id)

    async def on_open(self, chosen_id: str, current: Lang, request: gr.Request) -> dict[Any, Any]:
        return await self.showing(request, current, chosen_id)

    async def on_rename(
        self, conversation_id: str, title: str, current: Lang, request: gr.Request
    ) -> dict[Any, Any]:
        store = store_of(self.app)
        if store is not None and conversation_id:
            principal = principal_from_gradio(request)
            await store.rename(principal.label, conversation_id, title)
        return await self.listing(request, current, conversation_id)

    async def on_delete(
        self, conversation_id: str, shown: Messages | None, current: Lang, request: gr.Request
    ) -> dict[Any, Any]:
        self.controls.request(str(request.session_hash), "reset")
        await _forget(self.app, conversation_id, shown, request)
        return await self.showing(request, current, "")

    async def on_submit(
        self,
        message: dict[str, Any] | None,
        history: Messages | None,
        conversation_id: str | None,
        current: Lang,
        request: gr.Request,
    ) -> AsyncIterator[dict[Any, Any]]:
        views = answer(self.app, message, history, conversation_id, current, request, self.controls)
        async for view in views:
            yield self.page.of(view)

    def on_stop(self, request: gr.Request) -> None:
        self.controls.request(str(request.session_hash), "stop")

    def on_new_chat(self, request: gr.Request) -> dict[Any, Any]:
        if self.controls.request(str(request.session_hash), "reset"):
            return {}  # the running answer resets the page itself
        page = self.page
        return {
            page.chat: [],
            page.question: idle_box(value=None),
            page.conversation: "",
            page.progress: progress_html(0.0),
        }

    async def after_answer(
        self, current: Lang, conversation_id: str, request: gr.Request
    ) -> dict[Any, Any]:
        return {
            self.page.question: idle_box(),
            self.page.stop: gr.update(visible=False),
            self.page.status: status_markdown(self.app, current),
            **await self.listing(request, current, conversation_id),
        }


def _show_stop() -> dict[str, Any]:
    return gr.update(visible=True)  # type: ignore[no-any-return]


def _wire(blocks: gr.Blocks, page: Page, on: Handlers, settings: Settings) -> None:
    """The events: each handler's inputs and the components it may update."""
    private: dict[str, Any] = {"api_visibility": "private"}
    free: dict[str, Any] = {**private, "concurrency_limit": None}
    # Stop in Send's place at once, outside the answer's stream
    page.question.submit(_show_stop, None, [page.stop], queue=False, **private)
    submitted = page.question.submit(
        on.on_submit,
        [page.question, page.chat, page.conversation, page.lang],
        page.answered,
        api_visibility="undocumented",
        concurrency_limit=None,
    )
    after = [page.question, page.stop, page.status, *page.listed]
    submitted.then(on.after_answer, [page.lang, page.conversation], after, **private)
    page.stop.click(on.on_stop, None, None, **free)
    for control in (page.chat.clear, page.delete.click):  # the trash icon deletes it too
        control(on.on_delete, [page.conversation, page.chat, page.lang], page.shown, **free)
    page.new_chat.click(
        on.on_new_chat, None, [page.chat, page.question, page.conversation, page.progress], **free
    ).then(on.on_listing, [page.lang, page.conversation], page.listed, **private)
    page.history.input(on.on_open, [page.history, page.lang], page.shown, **private)
    renaming = [page.conversation, page.title_box, page.lang]
    page.rename.click(on.on_rename, renaming, page.listed, **private)
    page.title_box.submit(on.on_rename, renaming, page.listed, **private)
    blocks.load(None, None, None, js=counter_js(settings))  # the browser counts
    loaded = [page.lang, *page.texts, page.chat, page.conversation, page.progress]
    blocks.load(on.on_load, [page.lang, page.conversation], loaded, **private)
    page.picker.input(
        on.on_pick, [page.picker, page.conversation], [page.lang, *page.texts], **private
    )


def merged(*updates: dict[Any, Any]) -> dict[Any, Any]:
    """Updates by component; two updates of one component are combined (later wins)."""
    out: dict[Any, Any] = {}
    for update in updates:
        for component, value in update.items():
            before = out.get(component)
            if isinstance(before, dict) and isinstance(value, dict):
                value = {**before, **value}
            out[component] = value
    return out


class Controls:
    """Stop and New-conversation requests per browser session, read by the running answer.

    The answer loop ends itself (closing the engine's iterator, which cancels the work)
    and writes its own last update, so nothing races with a cancelled Gradio event."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.requested: dict[str, str] = {}  # session -> "stop" | "reset"

    def request(self, session: str, what: str) -> bool:
        """Ask the session's running answer to ``what``; False when none is running."""
        if session not in self.running:
            return False
        self.requested[session] = what
        return True

    def begin(self, session: str) -> None:
        self.running.add(session)
        self.requested.pop(session, None)

    def take(self, session: str) -> str | None:
        return self.requested.pop(session, None)

    def end(self, session: str) -> None:
        self.running.discard(session)
        self.requested.pop(session, None)


async def answer(
    app: FastAPI,
    message: dict[str, Any] | None,
    history: Messages | None,
    conversation_id: str | None,
    lang: Lang,
    request: gr.Request,
    controls: Controls | None = None,
) -> AsyncIterator[ChatView]:
    """The submit handler's updates after every event; the status line is re-read when a
    stage changes, not on every token."""
    controls = controls or Controls()
    session = str(getattr(request, "session_hash", None) or id(request))
    controls.begin(session)
    try:
        async for update in _answer(
            app, message, history, conversation_id, lang, request, lambda: controls.take(session)
        ):
            yield update
    finally:
        controls.end(session)


async def _answer(
    app: FastAPI,
    message: dict[str, Any] | None,
    history: Messages | None,
    conversation_id: str | None,
    lang: Lang,
    request: gr.Request,
    control: Callable[[], str | None],
) -> AsyncIterator[ChatView]:
    text = str((message or {}).get("text") or "")
    files = [_path_of(f) for f in (message or {}).get("files") or []]
    chat = normalize(history)
    shown = _image_count(chat)
    chat += [image_message(f, shown + i + 1, lang) for i, f in enumerate(files)]
    if text.strip():
        chat.append({"role": "user", "content": escape_markdown_html(text)})
    stage = {
        "role": "assistant",
        "content": "",
        "metadata": {"title": t("working", lang), "status": "pending"},
    }
    reply: dict[str, Any] = {"role": "assistant", "content": ""}
    chat += [stage, reply]
    # locked while the answer runs; the Stop button below takes the Send button's place
    locked = gr.update(value=None, interactive=False, submit_btn=False)
    yield ChatView(chat, locked, progress_html(0.0), conversation_id, gr.update())
    busy = gr.update()  # later updates leave the box as it is
    attached = False
    try:
        principal = principal_from_gradio(request)
        if (uploads := services_of(app).uploads) is not None:
            await uploads.check(principal, files)  # another principal's upload: not found
        conversation_id = conversation_id or await _new_conversation(app, principal)
        ask = AskRequest(
            tenant=principal.tenant,
            user=principal.user,
            question=text,
            images=[Path(f).read_bytes() for f in files],
            conversation_id=conversation_id,
            lang=lang,
        )
        async with aclosing(ask_as(services_of(app), principal, ask)) as events:
            async for event in events:
                _apply(event, stage, reply, lang)
                attached = attached or _attached(event)
                if (wanted := control()) is not None:
                    break  # leaving the block closes the iterator: the work is cancelled
                if isinstance(event, Failed):
                    break
                status = gr.update() if isinstance(event, Token) else status_markdown(app, lang)
                yield ChatView(chat, busy, progress_html(_progress(event)), conversation_id, status)
            else:
                return
        if not isinstance(event, Failed):
            if wanted == "reset":
                blank = idle_box(value=None)
                yield ChatView([], blank, progress_html(0.0), None, status_markdown(app, lang))
                return
            box = _kept_input(None, files, attached)
            stopped = _stopped(chat, lang)
            yield ChatView(
                stopped, box, progress_html(0.0), conversation_id, status_markdown(app, lang)
            )
            return
    except QwenUIError as exc:
        _apply(Failed.of(exc, lang), stage, reply, lang)
    chat, box = _after_failure(chat, text, files, attached)
    yield ChatView(chat, box, progress_html(0.0), conversation_id, status_markdown(app, lang))


async def _forget(
    app: FastAPI, conversation_id: str | None, shown: Messages | None, request: gr.Request
) -> None:
    """Delete the principal's conversation, and let go of the uploads the chat showed."""
    store = store_of(app)
    if store is None or not conversation_id:
        return
    principal = principal_from_gradio(request)
    await store.delete(principal.label, conversation_id)
    services = maybe_services(app)
    if services is not None and services.uploads is not None:
        paths = [_path_of(m["content"]) for m in normalize(shown) if _is_image(m)]
        await services.uploads.forget(principal, paths)


async def _new_conversation(app: FastAPI, principal: Principal) -> str | None:
    """A conversation stored before the first question, so that it keeps the images of a
    turn that is stopped or fails; None when there is no engine (the ask fails typed)."""
    store = store_of(app)
    if store is None:
        return None
    conversation = await store.create(principal.tenant, principal.label)
    return str(conversation.id)


def _attached(event: Event) -> bool:
    """Whether the conversation now holds the turn's new images: they are attached once
    every one was decoded, i.e. at the first event after the decoding stages."""
    if isinstance(event, Stage):
        return event.stage != "decoding"
    if isinstance(event, Failed):
        return event.conversation_id is not None
    return True


def _kept_input(text: str | None, files: list[str], attached: bool) -> Any:
    """The question box after a turn that did not answer: images the conversation did not
    take go back into it (with the text, when the submit was refused)."""
    back = [] if attached else files
    if not text and not back:
        return idle_box()  # whatever was typed meanwhile stays
    return idle_box(value={"text": text or "", "files": back})


def _after_failure(
    chat: Messages, text: str, files: list[str], attached: bool
) -> tuple[Messages, Any]:
    """A refused or failed turn: the chat keeps the images only when the conversation
    holds them; the question goes back into the box with any images not taken."""
    if not attached and files:
        chat = [m for m in chat if not _is_image(m) or _path_of(m["content"]) not in files]
    return chat, _kept_input(text, files, attached)


def idle_box(**value: Any) -> Any:
    """The question box when no answer runs: usable, with its Send button."""
    return gr.update(interactive=True, submit_btn=True, **value)


def _is_image(message: dict[str, Any]) -> bool:
    return message.get("role") == "user" and isinstance(message.get("content"), dict)


def _image_count(chat: Messages) -> int:
    return sum(1 for m in chat if _is_image(m))


def _apply(event: Event, stage: dict[str, Any], reply: dict[str, Any], lang: Lang) -> str | None:
    """Fold one engine event into the two assistant messages; the conversation id on done."""
    meta = stage["metadata"]
    if isinstance(event, Stage):
        label = event.label(lang)
        meta["title"] = label
        stage["content"] += ("\n" if stage["content"] else "") + f"• {label}"
    elif isinstance(event, Token):
        reply["content"] += event.text
    elif isinstance(event, Done):
        meta["status"] = "done"
        # one duration, in one format (Gradio's own "(0.5s)" beside it is not set)
        key = "done_in_one" if event.completion_tokens == 1 else "done_in"
        meta["title"] = t(key, lang).format(
            seconds=f"{event.timings.get('total', 0.0):.1f}", tokens=event.completion_tokens
        )
        reply["content"] = event.answer
        if event.images_seen == 0:
            reply["content"] += f"\n\n*{t('no_image_used', lang)}*"
        return event.conversation_id
    elif isinstance(event, Failed):
        meta["status"] = "done"
        meta["title"] = t("failed", lang)
        reply["content"] = f"⚠️ {event.message}"
    return None


def normalize(history: Messages | None) -> Messages:
    """The Chatbot's value as it comes back from the browser (content as lists of typed
    parts) in the simple form this module writes: one message per text or file part."""
    out: Messages = []
    for message in history or []:
        content = message.get("content")
        parts = content if isinstance(content, list) else [content]
        for part in parts:
            item: dict[str, Any] = {
                "role": message.get("role", "assistant"),
                "content": _part(part),
            }
            if message.get("metadata"):
                item["metadata"] = dict(message["metadata"])
            out.append(item)
    return out


def _part(part: Any) -> Any:
    if isinstance(part, dict):
        if part.get("type") == "text" or "text" in part:
            return str(part.get("text", ""))
        nested = part.get("file")
        file: dict[str, Any] = nested if isinstance(nested, dict) else part
        if file.get("path"):
            found = {"path": str(file["path"])}
            if alt := part.get("alt_text") or file.get("alt_text"):
                found["alt_text"] = str(alt)
            return found
    return part if isinstance(part, str) else str(part or "")


def _progress(event: Event) -> float:
    return float(getattr(event, "progress", 0.0))


def _stopped(history: Messages | None, lang: Lang) -> Messages:
    """After Stop: the chat with any pending stage message closed."""
    chat = normalize(history)
    for message in chat:
        meta = message.get("metadata") or {}
        if meta.get("status") == "pending":
            meta["status"] = "done"
            meta["title"] = t("stopped", lang)
    return chat


def _path_of(item: Any) -> str:
    if isinstance(item, dict):
        return str(item.get("path"))
    return str(getattr(item, "path", item))


def _demo_examples(settings: Any, question: gr.MultimodalTextbox) -> dict[str, gr.Column]:
    """One block of example prompts and images per language (the demo's own grammar);
    the language switch shows the matching one."""
    blocks: dict[str, gr.Column] = {}
    for code in LANGS:
        with gr.Column(visible=code == "en", elem_id=f"qwen-examples-{code}") as column:
            found = demo_examples(settings.home / "examples", code)
            gr.Examples(
                [{"text": e.question, "files": [str(p) for p in e.images]} for e in found],
                inputs=[question],
                label=t("examples", code),
                examples_per_page=len(found),
            )
        blocks[code] = column
    return blocks


def _header(lang: Lang) -> str:
    return f"# {t('title', lang)}\n{t('tagline', lang)}"


def _relabel(app: FastAPI, page: Page, lang: Lang, who: str) -> dict[Any, Any]:
    """Every text of the page in ``lang``."""
    return {
        page.header: gr.update(value=_header(lang)),
        page.picker: gr.update(value=lang, label=t("language", lang)),
        page.status: gr.update(value=status_markdown(app, lang)),
        page.chat: gr.update(label=t("chat", lang)),
        page.question: gr.update(
            label=t("question", lang), placeholder=t("question_placeholder", lang)
        ),
        page.stop: gr.update(value=t("stop", lang)),
        page.new_chat: gr.update(value=t("new_chat", lang)),
        page.logout: gr.update(value=logout_html(services_of(app).settings, lang, who)),
        page.demo_note: gr.update(value=DEMO_NOTICE[lang]),
        **{column: gr.update(visible=code == lang) for code, column in page.examples.items()},
        page.history: gr.update(label=t("history", lang)),
        page.title_box: gr.update(label=t("title_label", lang)),
        page.rename: gr.update(value=t("rename", lang)),
        page.delete: gr.update(value=t("delete", lang)),
    }
