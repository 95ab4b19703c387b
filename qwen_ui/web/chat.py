"""One question answered in the chat: the messages it adds and the updates while it streams.

The chat holds one message per image, the question, a collapsible stage message (Gradio's
metadata message: ``metadata.title`` names the stage, ``status`` pending → done, its body
the stage log) and the answer in a message of its own, so a message's copy button copies
the answer text only. Stop and New conversation reach the running answer through
:class:`Controls`: the loop ends itself (closing the engine's iterator, which cancels the
work) and writes its own last update, so nothing races with a cancelled Gradio event.

Regenerate and edit take the last question back (:func:`take_back`) and answer it again
through the same loop.
"""

from __future__ import annotations

import html
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import gradio as gr
from fastapi import FastAPI

from qwen_ui.auth.principal import Principal
from qwen_ui.engine.engine import AskRequest
from qwen_ui.engine.events import Done, Event, Failed, Stage, Token
from qwen_ui.engine.status import EngineState, EngineStatus
from qwen_ui.errors import QwenUIError
from qwen_ui.services import maybe_services, services_of
from qwen_ui.web.asking import ask_as
from qwen_ui.web.auth import principal_from_gradio
from qwen_ui.web.history import escape_markdown_html, image_message, store_of
from qwen_ui.web.i18n import Lang, t

log = logging.getLogger(__name__)

Messages = list[dict[str, Any]]
ANSWERED = "answered-"  # the id of the stage message of a turn the server stored
# the answer's text is sent at most this often (seconds): every token would re-render the
# whole growing message in the browser, hundreds of times a second on a fast GPU
FRAME_S = 0.05
_BAR = "height:6px;border-radius:3px;overflow:hidden;background:var(--border-color-primary)"
_FILL = "height:100%;background:var(--color-accent);transition:width .2s"


@dataclass(frozen=True)
class ChatView:
    """One update of the chat while a question is answered, by name; ``gr.update()``
    leaves a component as it is."""

    chat: Any  # the messages
    box: Any  # the question box
    progress: str  # the progress bar's HTML
    conversation: str | None  # the conversation's id
    status: Any  # the status line


def status_markdown(app: FastAPI, lang: Lang) -> str:
    """What exists right now: the configured model, whether it is installed, engine state."""
    services = services_of(app)
    settings, engine = services.settings, services.status
    model_id, _, revision = services.models.default.name.partition("@")  # the default now
    installed = services.store.is_installed(model_id, revision)
    lines = [
        f"**{t('model', lang)}:** `{model_id}` · {t('revision', lang)} "
        f"`{revision}` · {t('installed' if installed else 'not_installed', lang)}",
        f"**{t('engine', lang)}:** {_model_state(engine, lang)}",
    ]
    if len(services.models.names) > 1:  # each offered model's state
        states = [
            f"`{e.name}` {_model_state(e.status, lang)}" for e in services.models.entries.values()
        ]
        lines[1] = f"**{t('engine', lang)}:** " + " · ".join(states)
    if settings.engine == "openai":  # answered by a remote model server
        host = urlsplit(settings.remote_base_url).netloc
        lines[0] = f"**{t('model', lang)}:** `{settings.remote_model}` · {host}"
    if not services.answering:
        lines.append(f"\n{t('no_engine', lang)}")
    return "\n\n".join(lines)


def _model_state(status: EngineStatus, lang: Lang) -> str:
    text = t(f"engine_{status.state.value}", lang)
    if status.state is EngineState.FAILED and status.reason:
        text += f": {status.reason}"
    return text


def progress_html(fraction: float, label: str = "") -> str:
    percent = max(0.0, min(100.0, fraction * 100))
    return (
        f'<div class="qwen-progress" role="progressbar" aria-valuenow="{percent:.0f}" '
        f'aria-valuemin="0" aria-valuemax="100" aria-label="{html.escape(label or "Progress")}" '
        f'title="{html.escape(label)}" style="{_BAR}">'
        f'<div class="qwen-progress-fill" style="width:{percent:.1f}%;{_FILL}"></div></div>'
    )


class Controls:
    """Stop and New-conversation requests per browser session, read by the running answer.

    Sending a question shows Stop at once, before its handler begins (``starts``); the
    earlier answer of the session may still be finishing then. Such pending starts are
    counted apart from the running answer, so that the earlier answer's end neither hides
    Stop nor drops a Stop pressed for the next one."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.starting: dict[str, int] = {}  # answers asked for, not begun yet
        self.requested: dict[str, str] = {}  # session -> "stop" | "reset"

    def request(self, session: str, what: str) -> bool:
        """Ask the session's answer to ``what`` (one asked for and not begun yet sees it
        at its first event); False when none runs or is about to."""
        if not self.busy(session):
            return False
        self.requested[session] = what
        return True

    def starts(self, session: str) -> None:
        """An answer was asked for (Stop is shown); it begins when its handler runs."""
        self.starting[session] = self.starting.get(session, 0) + 1

    def busy(self, session: str) -> bool:
        """Whether an answer runs or is about to: the page keeps Stop meanwhile."""
        return session in self.running or session in self.starting

    def declined(self, session: str) -> None:
        """An answer asked for will not run (a refused submit, retry or edit)."""
        left = self.starting.get(session, 0) - 1
        if left > 0:
            self.starting[session] = left
        else:
            self.starting.pop(session, None)

    def begin(self, session: str) -> None:
        if session not in self.starting:
            self.requested.pop(session, None)  # a stale request: nothing was asked since
        self.declined(session)  # the start it was asked with is taken
        self.running.add(session)

    def take(self, session: str) -> str | None:
        return self.requested.pop(session, None)

    def end(self, session: str) -> None:
        self.running.discard(session)
        if session not in self.starting:  # a request for the next answer stays
            self.requested.pop(session, None)


def session_of(request: gr.Request) -> str:
    return str(getattr(request, "session_hash", None) or id(request))


async def answer(
    app: FastAPI,
    message: dict[str, Any] | None,
    history: Messages | None,
    conversation_id: str | None,
    lang: Lang,
    request: gr.Request,
    controls: Controls | None = None,
    model: str | None = None,
) -> AsyncIterator[ChatView]:
    """The submit handler's updates after every event, the answer's text at most every
    ``FRAME_S`` (its first token at once); the status line is re-read when a stage
    changes, not on every token. ``model``: the picked one ("" or None: the
    conversation's, else the default)."""
    controls = controls or Controls()
    session = session_of(request)
    controls.begin(session)
    exchange = Exchange.start(app, message, history, conversation_id, lang)
    exchange.model = model or None
    try:
        yield exchange.asked()
        try:
            async for view in exchange.run(request, lambda: controls.take(session)):
                yield view
        except QwenUIError as exc:
            exchange.apply(Failed.of(exc, lang))
            yield exchange.failed()
    finally:
        controls.end(session)


@dataclass
class Exchange:
    """A question and its answer as they are added to the chat."""

    app: FastAPI
    lang: Lang
    text: str
    files: list[str]
    chat: Messages
    conversation_id: str | None
    stage: dict[str, Any] = field(default_factory=dict)
    reply: dict[str, Any] = field(default_factory=dict)
    attached: bool = False  # the conversation holds the new images
    queued: bool = False  # the stage log's last line is the place in line
    model: str | None = None  # the picked model (None: the server picks)

    @classmethod
    def start(
        cls,
        app: FastAPI,
        message: dict[str, Any] | None,
        history: Messages | None,
        conversation_id: str | None,
        lang: Lang,
    ) -> Exchange:
        text = str((message or {}).get("text") or "")
        files = [_path_of(f) for f in (message or {}).get("files") or []]
        chat = normalize(history)
        if not chat:
            # the page shows nothing of a stored conversation (the trash or New chat was
            # pressed while its reply was on its way): the question starts a new one
            conversation_id = None
        shown = _image_count(chat)
        chat += [image_message(f, shown + i + 1, lang) for i, f in enumerate(files)]
        if text.strip():
            chat.append({"role": "user", "content": escape_markdown_html(text)})
        title = {"title": t("working", lang), "status": "pending"}
        stage = {"role": "assistant", "content": "", "metadata": title}
        reply: dict[str, Any] = {"role": "assistant", "content": ""}
        chat.append(stage)  # the answer's own message joins with its first text
        return cls(app, lang, text, files, chat, conversation_id, stage, reply)

    @property
    def shown(self) -> Messages:
        """The chat with the answer's message once it has text (no empty bubble)."""
        return [*self.chat, self.reply] if self.reply["content"] else self.chat

    def asked(self) -> ChatView:
        """The question is in the chat: the box is emptied (it stays usable for typing the
        next question) and Stop takes the Send button's place."""
        box = gr.update(value=None, submit_btn=False)
        return ChatView(self.shown, box, progress_html(0.0), self.conversation_id, gr.update())

    async def run(
        self, request: gr.Request, control: Callable[[], str | None]
    ) -> AsyncIterator[ChatView]:
        principal = principal_from_gradio(request)
        ask = await self._request(principal)
        event: Event | None = None
        wanted: str | None = None
        shown_at: float | None = None  # when the answer's text was last sent
        async with aclosing(ask_as(services_of(self.app), principal, ask, self.model)) as events:
            async for event in events:
                self.apply(event)
                if (wanted := control()) is not None or isinstance(event, Failed):
                    break  # leaving the block closes the iterator: the work is cancelled
                if isinstance(event, Token):
                    now = time.monotonic()
                    if shown_at is not None and now - shown_at < FRAME_S:
                        continue  # the next frame (or the done event) carries this text
                    shown_at = now
                yield self.progressed(event)
            else:
                return
        yield self.failed() if isinstance(event, Failed) else self.ended(wanted)

    async def _request(self, principal: Principal) -> AskRequest:
        if (uploads := services_of(self.app).uploads) is not None:
            await uploads.check(principal, self.files)  # another principal's upload: not found
        self.conversation_id = self.conversation_id or await _new_conversation(self.app, principal)
        return AskRequest(
            tenant=principal.tenant,
            user=principal.user,
            question=self.text,
            images=[Path(f).read_bytes() for f in self.files],
            conversation_id=self.conversation_id,
            lang=self.lang,
        )

    def apply(self, event: Event) -> None:
        """Fold one engine event into the stage and answer messages."""
        if isinstance(event, Stage):
            self._log(event)
        else:
            _apply(event, self.stage, self.reply, self.lang)
        self.attached = self.attached or _attached(event)

    def _log(self, event: Stage) -> None:
        """A stage starts: the title names it and the log gets a line; a new place in line
        replaces the last one (the log is not a list of positions)."""
        label = event.label(self.lang)
        self.stage["metadata"]["title"] = label
        lines = self.stage["content"].split("\n") if self.stage["content"] else []
        if self.queued and event.stage == "queued":
            lines.pop()
        self.stage["content"] = "\n".join([*lines, f"• {label}"])
        self.queued = event.stage == "queued"

    def progressed(self, event: Event) -> ChatView:
        status = gr.update() if isinstance(event, Token) else status_markdown(self.app, self.lang)
        progress = progress_html(float(getattr(event, "progress", 0.0)))
        return ChatView(self.shown, gr.update(), progress, self.conversation_id, status)

    def ended(self, wanted: str | None) -> ChatView:
        """Stopped, or the page asked for a new conversation."""
        status = status_markdown(self.app, self.lang)
        if wanted == "reset":
            return ChatView([], idle_box(value=None), progress_html(0.0), None, status)
        box = _kept_input(None, self.files, self.attached)
        chat = _stopped(self.shown, self.lang)
        return ChatView(chat, box, progress_html(0.0), self.conversation_id, status)

    def failed(self) -> ChatView:
        """A refused or failed turn: the chat keeps the images only when the conversation
        holds them; the question goes back into the box with any images not taken."""
        chat = self.shown
        if not self.attached and self.files:
            chat = [m for m in chat if not _is_image(m) or _path_of(m["content"]) not in self.files]
        box = _kept_input(self.text, self.files, self.attached)
        status = status_markdown(self.app, self.lang)
        return ChatView(chat, box, progress_html(0.0), self.conversation_id, status)


# --- regenerate and edit -------------------------------------------------------------
def last_question(chat: Messages) -> int | None:
    """The index of the chat's last question (a text the user sent), None when the last
    thing the user sent is not a question (images only)."""
    for i in range(len(chat) - 1, -1, -1):
        if chat[i].get("role") == "user":
            return i if isinstance(chat[i].get("content"), str) else None
    return None


def question_text(chat: Messages, index: int) -> str:
    """The question as the user typed it (the chat shows it escaped)."""
    return html.unescape(str(chat[index]["content"]))


def was_stored(chat: Messages, index: int) -> bool:
    """Whether the server's conversation holds the question at ``index`` as its last
    answered turn: its stage message says it was answered, or it has none (a chat drawn
    from the server shows answered turns only). A stopped or failed question was not."""
    stages = [m["metadata"] for m in chat[index + 1 :] if m.get("metadata")]
    return not stages or str(stages[-1].get("id", "")).startswith(ANSWERED)


async def take_back(app: FastAPI, request: gr.Request, conversation_id: str | None) -> None:
    """Drop the last answered turn from the principal's conversation (its images stay)."""
    store = store_of(app)
    if store is None or not conversation_id:
        return
    principal = principal_from_gradio(request)
    try:
        conversation = await store.get(principal.label, conversation_id)
    except QwenUIError:
        return  # gone: asking again fails with the typed message
    await store.drop_last_turn(conversation)


# --- helpers ---------------------------------------------------------------------------
async def forget(
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


def idle_box(**value: Any) -> Any:
    """The question box when no answer runs: usable, with its Send button."""
    return gr.update(interactive=True, submit_btn=True, **value)


def _is_image(message: dict[str, Any]) -> bool:
    return message.get("role") == "user" and isinstance(message.get("content"), dict)


def _image_count(chat: Messages) -> int:
    return sum(1 for m in chat if _is_image(m))


def _apply(event: Event, stage: dict[str, Any], reply: dict[str, Any], lang: Lang) -> None:
    """Fold a token, done or failed event into the two assistant messages."""
    meta = stage["metadata"]
    if isinstance(event, Token):
        reply["content"] += event.text
    elif isinstance(event, Done):
        meta["status"] = "done"
        meta["id"] = ANSWERED + secrets.token_hex(4)  # regenerate and edit look for it
        # one duration, in one format (Gradio's own "(0.5s)" beside it is not set)
        key = "done_in_one" if event.completion_tokens == 1 else "done_in"
        meta["title"] = t(key, lang).format(
            seconds=f"{event.timings.get('total', 0.0):.1f}", tokens=event.completion_tokens
        )
        reply["content"] = event.answer_text or event.answer  # boxes as labels
        if event.images_seen == 0:
            reply["content"] += f"\n\n*{t('no_image_used', lang)}*"
    elif isinstance(event, Failed):
        meta["status"] = "done"
        meta["title"] = t("failed", lang)
        reply["content"] = f"⚠️ {event.message}"


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
