"""The chat's drawing of an answer's boxes, without a browser: the text, the located
images, the switch, and drawing the last answer from the conversation."""

from __future__ import annotations

import hashlib
from pathlib import Path

from PIL import Image

from qwen_ui.engine.annotate import PALETTE
from qwen_ui.engine.conversations import ConversationStore, StoredTurn
from qwen_ui.state import MemoryState
from qwen_ui.web.chat_boxes import (
    draw_last_answer,
    shown_text,
    tenant_folder,
    turn_messages,
    with_boxes_shown,
)
from tests.engine.conftest import png

WHITE = png((120, 90), (255, 255, 255))
SHA = hashlib.sha256(WHITE).hexdigest()
BOX = {"sha256": SHA, "label": "star", "box": [20, 30, 60, 70]}
JSON = '[{"bbox_2d": [20, 30, 60, 70], "label": "star"}]'


def turn(answer_text: str = "star", boxes: list[dict[str, object]] | None = None) -> StoredTurn:
    return StoredTurn("Where?", JSON, [SHA], answer_text, [BOX] if boxes is None else boxes)


def test_an_answer_of_boxes_only_reads_as_its_labels_with_image_numbers() -> None:
    assert shown_text(turn(), {SHA: 3}, "en") == "star (image 3)"
    assert shown_text(turn(), {SHA: 3}, "zh") == "star（图片 3）"
    two = turn("star ×2", [BOX, {**BOX, "box": [0, 0, 5, 5]}])
    assert shown_text(two, {SHA: 1}, "en") == "star ×2 (image 1)"


def test_words_around_the_boxes_stay_and_the_list_follows() -> None:
    said = turn("The star is here: star. Nothing else.")
    assert shown_text(said, {SHA: 2}, "en") == (
        "The star is here: star. Nothing else.\n\n📍 star (image 2)"
    )
    assert shown_text(turn(boxes=[]), {}, "en") == "star"  # no boxes: the answer as it is


async def test_located_image_is_drawn_and_its_plain_twin_is_beside_it() -> None:
    store = ConversationStore(MemoryState(), ttl_s=60)
    conversation = await store.create("acme", "acme/alice")
    await store.attach(conversation, {SHA: WHITE})
    text, image = await turn_messages(store, "acme", turn(), {SHA: 1}, "en")
    assert text == {"role": "assistant", "content": "star (image 1)"}
    path = Path(image["content"]["path"])
    assert path.parent == tenant_folder("acme") and "-boxes-" in path.name
    assert image["content"]["alt_text"] == "image 1, where the answer located: star"
    drawn = Image.open(path).convert("RGB")
    assert drawn.getpixel((20, 50)) == PALETTE[0] and drawn.getpixel((40, 50)) == (255,) * 3
    shown = [{"role": "user", "content": "Where?"}, image]
    hidden = with_boxes_shown(shown, False, "acme")
    plain = Path(hidden[1]["content"]["path"])
    assert "-plain-" in plain.name and Image.open(plain).convert("RGB").getpixel((20, 50)) == (
        255,
        255,
        255,
    )
    assert hidden[0] == shown[0]
    assert with_boxes_shown(hidden, True, "acme")[1]["content"]["path"] == str(path)


async def test_the_switch_only_finds_files_in_the_tenants_own_folder() -> None:
    store = ConversationStore(MemoryState(), ttl_s=60)
    conversation = await store.create("acme", "acme/alice")
    await store.attach(conversation, {SHA: WHITE})
    _, image = await turn_messages(store, "acme", turn(), {SHA: 1}, "en")
    # another tenant's chat naming acme's file (as a browser could) gets nothing swapped
    assert with_boxes_shown([image], False, "other") == [image]
    sneaky = {"role": "assistant", "content": {"path": "/etc/x-boxes-../../passwd"}}
    assert with_boxes_shown([sneaky], False, "acme") == [sneaky]


async def test_the_last_answer_is_drawn_once_and_only_when_it_is_that_turns() -> None:
    store = ConversationStore(MemoryState(), ttl_s=60)
    conversation = await store.create("acme", "acme/alice")
    await store.attach(conversation, {SHA: WHITE})
    await store.append(conversation, StoredTurn("Where?", JSON, []), {})
    await store.describe("acme/alice", conversation.id, JSON, answer_text="star", boxes=[BOX])
    conversation = await store.get("acme/alice", conversation.id)
    stage = {"role": "assistant", "content": "• Answering", "metadata": {"title": "Done"}}
    chat = [{"role": "user", "content": "Where?"}, stage, {"role": "assistant", "content": "star"}]
    drawn = await draw_last_answer(store, conversation, chat, "en", True)
    assert drawn is not None and drawn[:2] == chat[:2]
    assert drawn[2]["content"] == "star (image 1)" and "-boxes-" in drawn[3]["content"]["path"]
    assert await draw_last_answer(store, conversation, drawn, "en", True) is None  # once
    failed = [*chat[:2], {"role": "assistant", "content": "⚠️ The model failed."}]
    assert await draw_last_answer(store, conversation, failed, "en", True) is None
    hidden = await draw_last_answer(store, conversation, chat, "en", False)
    assert hidden is not None and "-plain-" in hidden[3]["content"]["path"]


async def test_an_image_gone_from_the_store_leaves_the_labels() -> None:
    store = ConversationStore(MemoryState(), ttl_s=60)
    other = png((50, 50), (1, 2, 3))
    gone = {**BOX, "sha256": hashlib.sha256(other).hexdigest()}
    messages = await turn_messages(store, "acme", turn(boxes=[gone]), {}, "en")
    assert messages == [{"role": "assistant", "content": "star"}]
