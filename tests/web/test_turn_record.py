"""What the web layer records with an answered turn."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from qwen_ui.engine.conversations import ConversationStore, StoredTurn
from qwen_ui.engine.engine import AskRequest
from qwen_ui.engine.events import Done, Stage
from qwen_ui.settings import Settings
from qwen_ui.state import MemoryState
from qwen_ui.web.turn_record import (
    TurnLog,
    boxes_on_files,
    model_of,
    stage_entry,
)


def done(conversation_id: str = "c", **extra: Any) -> Done:
    return Done("a", conversation_id, 1, 1, 1, 0, "stop", {"total": 0.1}, **extra)


def test_boxes_name_their_image_by_sha256() -> None:
    images = ["sha-one", "sha-two"]  # the conversation's, numbered from 1
    boxes = [
        {"image": 2, "label": "star", "box": [1, 2, 3, 4]},
        {"image": 3, "label": "lost", "box": [1, 2, 3, 4]},  # no such image: left out
    ]
    assert boxes_on_files(boxes, images) == [
        {"sha256": "sha-two", "label": "star", "box": [1, 2, 3, 4]}
    ]


async def test_a_follow_ups_boxes_land_on_the_conversations_images() -> None:
    store = ConversationStore(MemoryState(), 60)
    conversation = await store.create("acme", "acme/alice")
    await store.attach(conversation, {"s1": b"one"})
    await store.append(conversation, StoredTurn("q1", "a1", []), {})
    await store.append(conversation, StoredTurn("q2", "a", []), {})  # no new image
    asked = AskRequest(tenant="acme", user="alice", question="q2", conversation_id=conversation.id)
    boxes = [{"image": 1, "label": "star", "box": [1, 2, 3, 4]}]
    await TurnLog().record(store, asked, done(conversation.id, boxes=boxes), Settings())
    turns = (await store.get("acme/alice", conversation.id)).turns
    assert turns[-1].boxes == [{"sha256": "s1", "label": "star", "box": [1, 2, 3, 4]}]


def test_a_stage_keeps_its_facts_not_its_progress() -> None:
    assert stage_entry(Stage.at("encoding", 2, 3, cached=True)) == {
        "stage": "encoding", "index": 2, "total": 3, "cached": True,
    }  # fmt: skip
    assert stage_entry(Stage.at("answering", prompt_tokens=40)) == {"stage": "answering"}


def test_the_model_is_the_configured_one_unless_the_event_names_it() -> None:
    local = Settings(model_id="Qwen/X", model_revision="awq")
    assert model_of(done(), local) == "Qwen/X@awq"
    remote = Settings(engine="openai", remote_model="qwen-vl-max", remote_base_url="http://h/v1")
    assert model_of(done(), remote) == "qwen-vl-max"


async def test_a_failing_store_costs_the_record_not_the_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken(ConversationStore):
        async def describe(self, *args: object, **kwargs: object) -> bool:
            raise ConnectionError("redis://:hunter2@db:6379 refused")

    request = AskRequest(tenant="acme", user="alice", question="Where?", images=[b"x"])
    with caplog.at_level(logging.INFO):
        await TurnLog().record(Broken(MemoryState(), 60), request, done(), Settings())
    assert "not recorded (ConnectionError)" in caplog.text and "hunter2" not in caplog.text


async def test_stateless_calls_record_nothing() -> None:
    store = ConversationStore(MemoryState(), 60)
    conversation = await store.create("acme", "acme/alice")
    await store.append(conversation, StoredTurn("q", "a", []), {})
    stateless = AskRequest(tenant="acme", user="alice", question="q", history=[])
    await TurnLog().record(store, stateless, done(conversation_id=conversation.id), Settings())
    assert (await store.get("acme/alice", conversation.id)).turns[0].model == ""
    asked = AskRequest(tenant="acme", user="alice", question="q", conversation_id=conversation.id)
    log = TurnLog()
    log.see(Stage.at("answering"))
    await log.record(store, asked, done(conversation_id=conversation.id), Settings())
    (turn,) = (await store.get("acme/alice", conversation.id)).turns
    assert turn.stages == [{"stage": "answering"}] and turn.timings == {"total": 0.1}
