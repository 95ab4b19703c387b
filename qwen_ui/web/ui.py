"""The Gradio Blocks UI: a thin client of the engine (on the app's services).

Images and a question go in through a ``MultimodalTextbox``; the answer streams into a
``Chatbot`` (:mod:`qwen_ui.web.chat`) under a collapsible stage message that names the
stage being worked on, with a progress bar beside it. Stop cancels the generator, which
closes the engine's iterator and so the work on the worker thread. The last answer can be
generated again and the last question edited and sent again (the Chatbot's own retry and
edit buttons); the box takes the next question while an answer streams, and sending it
then is refused with a message (the text stays in the box).
"""

from __future__ import annotations

import html
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import gradio as gr
from fastapi import FastAPI

from qwen_ui.demo.examples import NOTICE as DEMO_NOTICE
from qwen_ui.demo.examples import examples as demo_examples
from qwen_ui.services import services_of
from qwen_ui.settings import Settings
from qwen_ui.web import chat_tools
from qwen_ui.web.a11y import a11y_js
from qwen_ui.web.auth import principal_from_gradio
from qwen_ui.web.chat import (
    ChatView,
    Controls,
    Messages,
    answer,
    forget,
    idle_box,
    last_question,
    normalize,
    progress_html,
    question_text,
    session_of,
    status_markdown,
    take_back,
    was_stored,
)
from qwen_ui.web.history import (
    choices,
    messages,
    open_conversation,
    store_of,
)
from qwen_ui.web.i18n import LANGS, Lang, is_lang, page_lang, t
from qwen_ui.web.model_picker import build_model_picker, picker_update
from qwen_ui.web.oss_panel import build_oss_panel
from qwen_ui.web.scope import declared_scope, is_demo, model_scope

log = logging.getLogger(__name__)

PAGE_TITLE = "qwen-ui · Visual Q&A · 视觉问答"
LANG_CHOICES = [("English", "en"), ("中文", "zh")]


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
    examples: dict[str, Any] = field(default_factory=dict)  # per language: scope, examples
    scopes: dict[Lang, Any] = field(default_factory=dict)  # the default model's scope note
    demo_examples: dict[Lang, Any] = field(default_factory=dict)  # the demo's example prompts
    show_boxes: Any = None  # gr.Checkbox: boxes drawn on located images (chat_tools)
    export_links: Any = None  # gr.HTML: the open conversation's export (chat_tools)
    model: Any = None  # the model picker (qwen_ui.web.model_picker)

    @property
    def texts(self) -> list[Any]:
        """What a language change relabels."""
        fixed = [self.header, self.picker, self.status, self.chat, self.question, self.stop]
        fixed += [self.new_chat, self.logout, self.demo_note, *self.examples.values()]
        fixed += [*self.scopes.values(), *self.demo_examples.values()]
        return [*fixed, self.history, self.title_box, self.rename, self.delete, self.model]

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
        export_links = chat_tools.export_links(settings)
    with gr.Row(elem_classes="qwen-header"):
        header = gr.Markdown(_header("en"))
        logout = gr.HTML(logout_html(settings, "en"), elem_id="qwen-logout", scale=0)
        picker = gr.Radio(
            LANG_CHOICES, value="en", label=t("language", "en"), scale=0, elem_id="qwen-lang"
        )
    status = gr.Markdown(elem_classes="qwen-status", elem_id="qwen-status")
    model = build_model_picker(settings)
    demo_note = gr.Markdown(visible=settings.is_demo_model, elem_id="qwen-demo-note")
    chat = gr.Chatbot(
        label=t("chat", "en"),
        elem_id="qwen-chat",
        height=460,
        # no "share" (it needs Hugging Face Spaces) and no "copy all" (it copies the
        # server's temp-file URLs); each message keeps its own copy button
        buttons=["copy"],
        # one bubble per message: the answer's copy button copies the answer only, not
        # the stage log above it; only text questions can be edited (not images)
        group_consecutive_messages=False,
        editable="user",
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
        show_boxes = chat_tools.show_boxes_box()
    build_oss_panel(app, blocks, question)
    about = _examples_and_scope(settings, question)
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
        examples=about.columns,
        scopes=about.scopes,
        demo_examples=about.demo,
        show_boxes=show_boxes,
        export_links=export_links,
        model=model,
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

    def lang(self, value: object, request: gr.Request) -> Lang:
        """The page's language as the browser sent it (any value): an unknown one is the
        default language (:func:`~qwen_ui.web.i18n.page_lang`)."""
        return page_lang(value, request, self.settings.language)

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
        self, stored_lang: object, stored_conversation: str, request: gr.Request
    ) -> dict[Any, Any]:
        asked = request.query_params.get("lang")  # ?lang= wins over the language kept
        chosen = self.lang(asked if is_lang(asked) else stored_lang, request)
        shown = await self.showing(request, chosen, stored_conversation)
        return merged(self.relabelled(request, chosen), shown)

    async def on_pick(
        self, picked: object, conversation_id: str, request: gr.Request
    ) -> dict[Any, Any]:
        chosen = self.lang(picked, request)
        listed = await self.listing(request, chosen, conversation_id)
        return merged(self.relabelled(request, chosen), listed)

    async def on_listing(
        self, current: object, conversation_id: str, request: gr.Request
    ) -> dict[Any, Any]:
        return await self.listing(request, self.lang(current, request), conversation_id)

    async def on_open(self, chosen_id: str, current: object, request: gr.Request) -> dict[Any, Any]:
        return await self.showing(request, self.lang(current, request), chosen_id)

    async def on_rename(
        self, conversation_id: str, title: str, current: object, request: gr.Request
    ) -> dict[Any, Any]:
        store = store_of(self.app)
        if store is not None and conversation_id:
            principal = principal_from_gradio(request)
            await store.rename(principal.label, conversation_id, title)
        return await self.listing(request, self.lang(current, request), conversation_id)

    async def on_delete(
        self, conversation_id: str, shown: Messages | None, current: object, request: gr.Request
    ) -> dict[Any, Any]:
        self.controls.request(session_of(request), "reset")
        await forget(self.app, conversation_id, shown, request)
        return await self.showing(request, self.lang(current, request), "")

    async def on_submit(
        self,
        message: dict[str, Any] | None,
        history: Messages | None,
        conversation_id: str | None,
        current: object,
        model: str | None,
        request: gr.Request,
    ) -> AsyncIterator[dict[Any, Any]]:
        lang = self.lang(current, request)
        if session_of(request) in self.controls.running:
            gr.Warning(t("still_answering", lang))
            self.controls.declined(session_of(request))
            yield {}  # nothing changes: the text stays in the box
            return
        views = answer(
            self.app, message, history, conversation_id, lang, request, self.controls, model
        )
        async for view in views:
            yield self.page.of(view)

    async def on_retry(
        self,
        history: Messages | None,
        conversation_id: str | None,
        current: object,
        model: str | None,
        request: gr.Request,
    ) -> AsyncIterator[dict[Any, Any]]:
        """Regenerate: the last question is asked again (its earlier answer dropped)."""
        lang = self.lang(current, request)
        again = self.again(None, history, conversation_id, lang, request, model)
        async for update in again:
            yield update

    async def on_edit(
        self,
        data: gr.EditData,
        history: Messages | None,
        conversation_id: str | None,
        current: object,
        model: str | None,
        request: gr.Request,
    ) -> AsyncIterator[dict[Any, Any]]:
        """The last question, edited, is asked instead of it; an earlier one is put back."""
        lang = self.lang(current, request)
        chat = normalize(history)
        if data.index != last_question(chat) or not isinstance(data.index, int):
            gr.Warning(t("edit_last_only", lang))
            self.controls.declined(session_of(request))
            if isinstance(data.index, int) and data.index < len(chat):
                chat[data.index]["content"] = str(data.previous_value)
            yield {self.page.chat: chat}
            return
        edited = str(data.value)
        again = self.again(edited, history, conversation_id, lang, request, model)
        async for update in again:
            yield update

    async def again(
        self,
        text: str | None,
        history: Messages | None,
        conversation_id: str | None,
        current: Lang,
        request: gr.Request,
        model: str | None = None,
    ) -> AsyncIterator[dict[Any, Any]]:
        """Ask the chat's last question again (``text`` instead, when edited): the server
        forgets its answered turn first; the turn's images stay and are seen again."""
        chat = normalize(history)
        index = last_question(chat)
        if index is None or session_of(request) in self.controls.running:
            gr.Warning(t("nothing_to_redo", current))
            self.controls.declined(session_of(request))
            yield {}
            return
        if was_stored(chat, index):
            await take_back(self.app, request, conversation_id)
        message = {"text": question_text(chat, index) if text is None else text, "files": []}
        views = answer(
            self.app, message, chat[:index], conversation_id, current, request, self.controls, model
        )
        async for view in views:
            yield self.page.of(view)

    def on_model(self, chosen: str, current: object, request: gr.Request) -> dict[Any, Any]:
        """The picked model's scope note under the picker."""
        lang = self.lang(current, request)
        return {self.page.model: picker_update(services_of(self.app), lang, chosen)}

    def on_stop(self, request: gr.Request) -> None:
        self.controls.request(session_of(request), "stop")

    def on_new_chat(self, request: gr.Request) -> dict[Any, Any]:
        if self.controls.request(session_of(request), "reset"):
            return {}  # the running answer resets the page itself
        page = self.page
        return {
            page.chat: [],
            page.question: idle_box(value=None),
            page.conversation: "",
            page.progress: progress_html(0.0),
        }

    async def after_answer(
        self, current: object, conversation_id: str, request: gr.Request
    ) -> dict[Any, Any]:
        lang = self.lang(current, request)
        listed = await self.listing(request, lang, conversation_id)
        if self.controls.busy(session_of(request)):
            # a refused submit (the answer that runs keeps Stop and the box), or an earlier
            # answer's last step arriving after the next question was sent
            return listed
        return {
            self.page.question: idle_box(),
            self.page.stop: gr.update(visible=False),
            self.page.status: status_markdown(self.app, lang),
            **listed,
        }

    def on_starting(self, request: gr.Request) -> Any:
        """Stop in Send's place at once; the earlier answer's last step must not hide it."""
        self.controls.starts(session_of(request))
        return gr.update(visible=True)


def _wire(blocks: gr.Blocks, page: Page, on: Handlers, settings: Settings) -> None:
    """The events: each handler's inputs and the components it may update."""
    private: dict[str, Any] = {"api_visibility": "private"}
    free: dict[str, Any] = {**private, "concurrency_limit": None}
    # Stop in Send's place at once, outside the answer's stream
    page.question.submit(on.on_starting, None, [page.stop], queue=False, **private)
    submitted = page.question.submit(
        on.on_submit,
        [page.question, page.chat, page.conversation, page.lang, page.model],
        page.answered,
        api_visibility="undocumented",
        concurrency_limit=None,
        trigger_mode="multiple",  # a second submit while answering is refused, not dropped
    )
    after = [page.question, page.stop, page.status, *page.listed]
    submitted.then(on.after_answer, [page.lang, page.conversation], after, **private)
    asked = [page.chat, page.conversation, page.lang, page.model]
    answering = [submitted]
    for event, handler in ((page.chat.retry, on.on_retry), (page.chat.edit, on.on_edit)):
        event(on.on_starting, None, [page.stop], queue=False, **private)
        again = event(handler, asked, page.answered, **free)
        again.then(on.after_answer, [page.lang, page.conversation], after, **private)
        answering.append(again)
    chat_tools.wire(on.app, settings, page, answered=answering)
    page.stop.click(on.on_stop, None, None, **free)
    for control in (page.chat.clear, page.delete.click):  # the trash icon deletes it too
        control(on.on_delete, [page.conversation, page.chat, page.lang], page.shown, **free)
    page.new_chat.click(
        on.on_new_chat, None, [page.chat, page.question, page.conversation, page.progress], **free
    ).then(on.on_listing, [page.lang, page.conversation], page.listed, **private)
    page.history.input(on.on_open, [page.history, page.lang], page.shown, **private)
    page.model.input(on.on_model, [page.model, page.lang], [page.model], **private)
    renaming = [page.conversation, page.title_box, page.lang]
    page.rename.click(on.on_rename, renaming, page.listed, **private)
    page.title_box.submit(on.on_rename, renaming, page.listed, **private)
    blocks.load(None, None, None, js=counter_js(settings))  # the browser counts
    blocks.load(None, None, None, js=a11y_js())  # names and alt texts, in the page's language
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


@dataclass
class AboutModel:
    """What the page says about the default model, one block per language (shown with the
    page in that language): its scope note and, for the demo model, example prompts."""

    columns: dict[str, gr.Column]
    scopes: dict[Lang, gr.Markdown]
    demo: dict[Lang, gr.Column]  # empty when the demo model was not offered at start


def _examples_and_scope(settings: Settings, question: gr.MultimodalTextbox) -> AboutModel:
    """The blocks as the start's default model fills them; each page load shows the
    default's of that moment (:func:`_about_default`). The demo's examples are built when
    the demo model is offered at start (they take a while to draw)."""
    scope = declared_scope(settings)
    demo = settings.engine == "local" and any(is_demo(m) for m in settings.model_refs)
    about = AboutModel({}, {}, {})
    for code in LANGS:
        filled = scope is not None or (demo and settings.is_demo_model)
        with gr.Column(visible=code == "en" and filled, elem_id=f"qwen-examples-{code}") as column:
            about.scopes[code] = gr.Markdown(
                _scope_text(scope, code),
                visible=scope is not None,
                elem_id=f"qwen-scope-{code}",
                elem_classes="qwen-scope",
            )
            if demo:
                with gr.Column(visible=settings.is_demo_model) as shown:
                    found = demo_examples(settings.home / "examples", code)
                    gr.Examples(
                        [{"text": e.question, "files": [str(p) for p in e.images]} for e in found],
                        inputs=[question],
                        label=t("examples", code),
                        examples_per_page=len(found),
                    )
                about.demo[code] = shown
        about.columns[code] = column
    return about


def _scope_text(scope: dict[Lang, str] | None, lang: Lang) -> str:
    return f"**{t('scope', lang)}:** {scope[lang]}" if scope else ""


def _about_default(app: FastAPI, page: Page, lang: Lang) -> dict[Any, Any]:
    """The demo notice, scope note and examples of the model that is the default now
    (after ``qwen-ui models activate`` or ``SIGHUP``, not the one of the start)."""
    services = services_of(app)
    default = services.models.default.name
    scope = model_scope(services.settings, default)
    demo = is_demo(default)
    filled = scope is not None or (demo and bool(page.demo_examples))
    return {
        page.demo_note: gr.update(value=DEMO_NOTICE[lang], visible=demo),
        **{
            column: gr.update(visible=code == lang and filled)
            for code, column in page.examples.items()
        },
        **{
            note: gr.update(value=_scope_text(scope, code), visible=scope is not None)
            for code, note in page.scopes.items()
        },
        **{shown: gr.update(visible=demo) for shown in page.demo_examples.values()},
    }


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
        **_about_default(app, page, lang),
        page.history: gr.update(label=t("history", lang)),
        page.title_box: gr.update(label=t("title_label", lang)),
        page.rename: gr.update(value=t("rename", lang)),
        page.delete: gr.update(value=t("delete", lang)),
        page.model: picker_update(services_of(app), lang),
    }
