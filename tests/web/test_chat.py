"""The chat handler of the Gradio page, driven directly (no browser): stage message,
streamed answer, conversation id, errors, stop, the place in line, asking again."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from qwen_ui.auth.principal import Principal
from qwen_ui.server import create_app
from qwen_ui.services import services_of
from qwen_ui.store import ModelStore
from qwen_ui.web.chat import (
    ANSWERED,
    ChatView,
    Exchange,
    _stopped,
    answer,
    last_question,
    progress_html,
    question_text,
    take_back,
    was_stored,
)
from tests.engine.conftest import TINY_ID, png, tiny_settings
from tests.engine.support import build_tiny_model
from tests.support.auth import add_tenants, local_tenant

USER = SimpleNamespace(username="demo/demo")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "bf16")


@pytest.fixture
def chat_app(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FastAPI]:
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))  # the test's files are uploads
    settings = tiny_settings(tmp_path / "home")
    ModelStore(settings.model_path).install(tiny_model, TINY_ID, "bf16")
    add_tenants(settings.tenants_path, local_tenant())  # USER's tenant (quotas look it up)
    app = create_app(settings)
    with TestClient(app):
        yield app


def image_files(tmp_path: Path, n: int) -> list[str]:
    paths = []
    for i in range(n):
        path = tmp_path / f"img{i}.png"
        path.write_bytes(png((40 + 10 * i, 50), (50 * i, 100, 200)))
        paths.append(str(path))
    return paths


async def run(
    app: FastAPI,
    message: dict[str, Any],
    history: list[Any] | None = None,
    conversation: str | None = None,
    lang: str = "en",
) -> list[ChatView]:
    """Every update, copied as Gradio serialises it at each yield."""
    await uploaded(app, message)
    updates = answer(app, message, history, conversation, lang, USER)  # type: ignore[arg-type]
    return [copy.deepcopy(u) async for u in updates]


async def uploaded(app: FastAPI, message: dict[str, Any]) -> None:
    """The message's files are the user's uploads, as Gradio's upload route records them."""
    registry = services_of(app).uploads
    assert registry is not None
    await registry.record(Principal("demo", "demo"), message.get("files") or [])


def stage_of(chat: list[dict[str, Any]]) -> dict[str, Any]:
    return next(m for m in reversed(chat) if m.get("metadata"))


def reply_of(chat: list[dict[str, Any]]) -> str:
    """The answer's text: the last message when it is an assistant's without metadata."""
    last = chat[-1] if chat else {}
    plain = last.get("role") == "assistant" and not last.get("metadata")
    return str(last["content"]) if plain else ""


async def test_answer_streams_stage_message_then_text(chat_app: FastAPI, tmp_path: Path) -> None:
    files = image_files(tmp_path, 2)
    updates = await run(chat_app, {"text": "What shape?", "files": files})
    chat, conversation, status = updates[-1].chat, updates[-1].conversation, updates[-1].status
    assert "ready" in status
    users = [m for m in chat if m["role"] == "user"]
    assert [u["content"] for u in users] == [
        {"path": files[0], "alt_text": "image 1, img0.png"},
        {"path": files[1], "alt_text": "image 2, img1.png"},
        "What shape?",
    ]
    stage, reply = chat[-2], chat[-1]
    assert stage["metadata"]["status"] == "done"
    assert stage["metadata"]["title"].startswith("Done in")
    assert "• Decoding image 1/2" in stage["content"]
    assert "• Encoding image 2/2" in stage["content"] and "• Answering" in stage["content"]
    assert conversation
    titles = [stage_of(u.chat)["metadata"]["title"] for u in updates]
    assert "Loading the model" in titles and "Answering" in titles
    pending = [stage_of(u.chat)["metadata"]["status"] for u in updates[:-1]]
    assert set(pending) == {"pending"}
    texts = [reply_of(u.chat) for u in updates]
    assert texts[0] == ""  # no empty answer bubble before the first text
    assert len({t for t in texts if t}) > 1  # the answer grew token by token
    assert texts[-1] == reply["content"]
    assert 'aria-valuenow="100"' in updates[-1].progress
    # follow-up in the same conversation, in Chinese
    more = await run(chat_app, {"text": "第二张呢？", "files": []}, chat, conversation, "zh")
    chat2, conversation2 = more[-1].chat, more[-1].conversation
    assert conversation2 == conversation and len(chat2) == len(chat) + 3
    assert chat2[-2]["metadata"]["title"].startswith("完成")


async def test_the_answer_text_is_sent_at_most_once_a_frame(
    chat_app: FastAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from qwen_ui.web import chat

    message = {"text": "What shape?", "files": image_files(tmp_path, 1)}
    monkeypatch.setattr(chat, "FRAME_S", 0.0)
    every = [reply_of(u.chat) for u in await run(chat_app, message)]
    monkeypatch.setattr(chat, "FRAME_S", 3600.0)
    framed = [reply_of(u.chat) for u in await run(chat_app, message)]
    assert framed[-1] == every[-1] and every[-1]  # the same answer in the end
    growing = [t for t in every if t]
    assert len(growing) > 2  # a view per token
    assert [t for t in framed if t] == [growing[0], growing[-1]]  # first token, then done


async def test_bad_input_shows_the_typed_message(chat_app: FastAPI, tmp_path: Path) -> None:
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"%PDF-1.4")
    updates = await run(chat_app, {"text": "What?", "files": [str(bad)]}, lang="zh")
    chat = updates[-1].chat
    assert chat[-2]["metadata"] == {"title": "失败", "status": "done"}
    assert "格式不受支持" in chat[-1]["content"]


async def test_a_refused_attachment_goes_back_into_the_box(
    chat_app: FastAPI, tmp_path: Path
) -> None:
    good, bad = image_files(tmp_path, 1)[0], tmp_path / "notes.txt"
    bad.write_text("not an image")
    updates = await run(chat_app, {"text": "What?", "files": [good, str(bad)]})
    chat, box = updates[-1].chat, updates[-1].box
    assert not [m for m in chat if isinstance(m["content"], dict)]  # the chat holds no image
    assert box["value"] == {"text": "What?", "files": [good, str(bad)]} and box["interactive"]
    assert sum("not a supported format" in str(m["content"]) for m in chat) == 1


async def test_image_only_submit_then_a_question(chat_app: FastAPI, tmp_path: Path) -> None:
    files = image_files(tmp_path, 2)
    refused = await run(chat_app, {"text": "", "files": files})
    chat, box, conversation = refused[-1].chat, refused[-1].box, refused[-1].conversation
    assert conversation and "value" not in box  # the images went to the conversation
    assert [m["content"]["path"] for m in chat if isinstance(m["content"], dict)] == files
    assert chat[-1]["content"] == "⚠️ Please type a question."
    answered = await run(chat_app, {"text": "Which is blue?", "files": []}, chat, conversation)
    chat2, conversation2 = answered[-1].chat, answered[-1].conversation
    assert conversation2 == conversation
    assert "• Encoding image 2/2" in chat2[-2]["content"]
    assert chat2[-2]["metadata"]["title"].startswith("Done in")


async def test_an_empty_chat_starts_a_new_conversation(chat_app: FastAPI, tmp_path: Path) -> None:
    # the trash emptied the page while its delete was on its way: the page still names
    # the old conversation, whose images the user no longer sees
    first = await run(chat_app, {"text": "Which is blue?", "files": image_files(tmp_path, 2)})
    old = first[-1].conversation
    after = await run(chat_app, {"text": "And now?", "files": []}, [], old)
    chat, conversation = after[-1].chat, after[-1].conversation
    assert conversation and conversation != old
    assert "Encoding image" not in chat[-2]["content"]
    assert not [m for m in chat if isinstance(m["content"], dict)]


async def test_user_text_is_not_rendered_as_html(chat_app: FastAPI) -> None:
    updates = await run(chat_app, {"text": "<img src=x> *why*?", "files": []})
    chat = updates[-1].chat
    assert "&lt;img src=x&gt; *why*?" in [m["content"] for m in chat if m["role"] == "user"]
    assert "No image was used" in chat[-1]["content"]


def test_done_title_says_one_token_and_one_duration() -> None:
    from qwen_ui.engine.events import Done
    from qwen_ui.web.chat import _apply

    stage: dict[str, Any] = {"content": "", "metadata": {"title": "", "status": "pending"}}
    reply: dict[str, Any] = {"content": ""}
    done = Done("yes", "c1", 10, 1, 1, 0, "stop", {"total": 0.5}, images_seen=1)
    _apply(done, stage, reply, "en")
    answered = stage["metadata"].pop("id")  # marks the turn as stored (for regenerate)
    assert answered.startswith(ANSWERED)
    assert stage["metadata"] == {"title": "Done in 0.5 s · 1 token", "status": "done"}
    _apply(done, stage, reply, "zh")
    assert "词元" not in stage["metadata"]["title"] and "1 个字词" in stage["metadata"]["title"]


def test_stop_closes_the_pending_stage() -> None:
    history = [
        {
            "role": "assistant",
            "content": "",
            "metadata": {"title": "Answering", "status": "pending"},
        }
    ]
    chat = _stopped(history, "en")
    assert chat[0]["metadata"] == {"title": "Stopped", "status": "done"}


def test_progress_bar_is_clamped() -> None:
    assert 'aria-valuenow="100"' in progress_html(3.0)
    assert "width:50.0%" in progress_html(0.5)


def test_history_from_the_browser_is_normalised() -> None:
    from qwen_ui.web.chat import normalize

    browser = [
        {
            "role": "user",
            "metadata": None,
            "options": None,
            "content": [{"file": {"path": "/tmp/a.png", "url": "/x"}, "type": "file"}],
        },
        {"role": "user", "metadata": None, "content": [{"text": "How many?", "type": "text"}]},
        {
            "role": "assistant",
            "metadata": {"title": "Answering", "status": "pending"},
            "content": [{"text": "• Answering", "type": "text"}],
        },
        {"role": "assistant", "metadata": None, "content": "three"},
    ]
    assert normalize(browser) == [
        {"role": "user", "content": {"path": "/tmp/a.png"}},
        {"role": "user", "content": "How many?"},
        {
            "role": "assistant",
            "content": "• Answering",
            "metadata": {"title": "Answering", "status": "pending"},
        },
        {"role": "assistant", "content": "three"},
    ]
    chat = _stopped(browser, "zh")
    assert chat[2]["metadata"]["title"] == "已停止"


async def stop_after_tokens(app: FastAPI, tmp_path: Path, what: str) -> list[ChatView]:
    from qwen_ui.web.chat import Controls

    controls = Controls()
    user = SimpleNamespace(username="demo/demo", session_hash="s1")
    message = {"text": "Describe", "files": image_files(tmp_path, 1)}
    await uploaded(app, message)
    updates = []
    async for update in answer(app, message, [], None, "en", user, controls):  # type: ignore[arg-type]
        updates.append(copy.deepcopy(update))
        if isinstance(update.chat, list) and reply_of(update.chat):
            controls.request("s1", what)  # the answer is streaming: press the button
    assert controls.running == set() and controls.requested == {}
    return updates


async def test_stop_ends_the_answer_and_cancels_the_work(chat_app: FastAPI, tmp_path: Path) -> None:
    from qwen_ui.engine.engine import Engine

    engine: Engine = services_of(chat_app).engine
    updates = await stop_after_tokens(chat_app, tmp_path, "stop")
    chat = updates[-1].chat
    assert chat[-2]["metadata"] == {"title": "Stopped", "status": "done"}
    assert chat[-1]["content"]  # the partial answer stays
    assert engine.metrics.requests.labels("cancelled")._value.get() == 1


async def test_new_conversation_while_answering_resets(chat_app: FastAPI, tmp_path: Path) -> None:
    updates = await stop_after_tokens(chat_app, tmp_path, "reset")
    assert updates[-1].chat == [] and updates[-1].conversation is None


def test_places_in_line_replace_each_other_in_the_stage_log(chat_app: FastAPI) -> None:
    from qwen_ui.engine.events import Stage

    exchange = Exchange.start(chat_app, {"text": "How many?", "files": []}, [], None, "en")
    exchange.apply(Stage("queued", ahead=2, wait_s=9.6))
    assert exchange.stage["metadata"]["title"] == "Waiting in line: position 3, about 10 s"
    exchange.apply(Stage("queued", ahead=0, wait_s=4.2))
    exchange.apply(Stage.at("encoding", 1, 1))
    assert exchange.stage["content"].split("\n") == [
        "• Waiting in line: position 1, about 4 s",
        "• Encoding image 1/1",
    ]
    zh = Exchange.start(chat_app, {"text": "几个？", "files": []}, [], None, "zh")
    zh.apply(Stage("queued", ahead=1, wait_s=3))
    assert zh.stage["metadata"]["title"] == "排队中：第 2 位，约 3 秒"


def test_the_last_question_and_whether_the_server_stored_it() -> None:
    image = {"role": "user", "content": {"path": "/tmp/a.png"}}
    question = {"role": "user", "content": "a &lt;b&gt; &amp; c?"}
    done = {"role": "assistant", "content": "", "metadata": {"title": "Done", "id": ANSWERED}}
    stopped = {"role": "assistant", "content": "", "metadata": {"title": "Stopped"}}
    reply = {"role": "assistant", "content": "two"}
    assert last_question([image, question, done, reply]) == 1
    assert question_text([image, question], 1) == "a <b> & c?"  # as it was typed
    assert last_question([question, done, reply, image]) is None  # images only since
    assert was_stored([image, question, done, reply], 1)
    assert not was_stored([image, question, stopped, reply], 1)
    assert was_stored([image, question, reply], 1)  # drawn from the server: stored turns


async def test_regenerate_takes_the_turn_back_and_answers_it_again(
    chat_app: FastAPI, tmp_path: Path
) -> None:
    files = image_files(tmp_path, 2)
    first = (await run(chat_app, {"text": "Which is blue?", "files": files}))[-1]
    chat, conversation = first.chat, first.conversation
    index = last_question(chat)
    assert index is not None and was_stored(chat, index)
    await take_back(chat_app, USER, conversation)  # type: ignore[arg-type]
    store = services_of(chat_app).engine.conversations
    held = await store.get("demo/demo", conversation)
    assert held.turns == [] and len(held.pending) == 2  # the images stay, pending again
    again = await run(
        chat_app, {"text": question_text(chat, index), "files": []}, chat[:index], conversation
    )
    chat2 = again[-1].chat
    assert [m["content"] for m in chat2[: index + 1]] == [m["content"] for m in chat[: index + 1]]
    assert "• Encoding image 2/2 (cached)" in chat2[-2]["content"]  # the same images, seen
    held = await store.get("demo/demo", conversation)
    assert [t.question for t in held.turns] == ["Which is blue?"] and len(held.turns[0].images) == 2


def test_an_answer_asked_for_keeps_stop_until_it_ends() -> None:
    """Stop is shown when a question is sent, before its handler begins: the earlier
    answer's end (whose last step hides Stop when nothing runs) must see the session as
    busy and keep a Stop pressed for the next answer; a refused question lets go."""
    from qwen_ui.web.chat import Controls

    controls = Controls()
    assert not controls.busy("s") and not controls.request("s", "stop")
    controls.begin("s")  # answer A runs
    controls.starts("s")  # B sent while A finishes
    assert controls.request("s", "stop")  # Stop pressed for B
    controls.end("s")  # A ends after that
    assert controls.busy("s")  # A's last step keeps Stop
    controls.begin("s")  # B begins
    assert controls.take("s") == "stop" and controls.starting == {}
    controls.end("s")
    assert not controls.busy("s")
    controls.begin("s")
    controls.starts("s")  # sent while A runs: refused
    controls.declined("s")
    assert controls.starting == {}
    controls.end("s")
    assert not controls.busy("s")  # A's last step hides Stop


async def test_a_file_the_user_did_not_upload_is_never_read(
    chat_app: FastAPI, tmp_path: Path
) -> None:
    secret = tmp_path / "home" / "secret.png"
    secret.write_bytes(png((40, 40), (1, 2, 3)))
    for path in (str(secret), "/etc/hostname"):
        updates = answer(chat_app, {"text": "What?", "files": [path]}, [], None, "en", USER)  # type: ignore[arg-type]
        chat = [copy.deepcopy(u) async for u in updates][-1].chat
        assert "does not exist (or has expired)" in chat[-1]["content"], path
