"""The chat's drawing of an answer's boxes, without a browser: the text, the located
images, the switch, drawing the last answer from the conversation, and each drawing
decoding its image once while its cost is held in the decode budget."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image

from qwen_ui.engine.annotate import PALETTE
from qwen_ui.engine.conversations import ConversationStore, StoredTurn
from qwen_ui.engine.decoding import DecodeBudget
from qwen_ui.engine.errors import DecodeBusy, ImageDecodeBudget
from qwen_ui.state import MemoryState
from qwen_ui.web import boxes_view, chat_boxes
from qwen_ui.web.chat_boxes import (
    Drawing,
    draw_last_answer,
    drawn_file,
    shown_text,
    tenant_folder,
    turn_messages,
    with_boxes_shown,
)
from tests.engine.conftest import png
from tests.support.decodes import count_decodes

WHITE = png((120, 90), (255, 255, 255))
SHA = hashlib.sha256(WHITE).hexdigest()
BOX = {"sha256": SHA, "label": "star", "box": [20, 30, 60, 70]}
JSON = '[{"bbox_2d": [20, 30, 60, 70], "label": "star"}]'
MiB = 1024 * 1024


def drawing(store: ConversationStore, capacity: int = 64 * MiB, timeout_s: float = 5) -> Drawing:
    return Drawing(store, DecodeBudget(capacity, timeout_s))


@pytest.fixture
def box_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh folder for drawn files (one drawn before is never drawn again)."""
    monkeypatch.setattr(chat_boxes, "BOX_DIR", tmp_path)
    return tmp_path


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
    text, image = await turn_messages(drawing(store), "acme", turn(), {SHA: 1}, "en")
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
    _, image = await turn_messages(drawing(store), "acme", turn(), {SHA: 1}, "en")
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
    drawn = await draw_last_answer(drawing(store), conversation, chat, "en", True)
    assert drawn is not None and drawn[:2] == chat[:2]
    assert drawn[2]["content"] == "star (image 1)" and "-boxes-" in drawn[3]["content"]["path"]
    assert await draw_last_answer(drawing(store), conversation, drawn, "en", True) is None  # once
    failed = [*chat[:2], {"role": "assistant", "content": "⚠️ The model failed."}]
    assert await draw_last_answer(drawing(store), conversation, failed, "en", True) is None
    hidden = await draw_last_answer(drawing(store), conversation, chat, "en", False)
    assert hidden is not None and "-plain-" in hidden[3]["content"]["path"]


async def test_an_image_gone_from_the_store_leaves_the_labels() -> None:
    store = ConversationStore(MemoryState(), ttl_s=60)
    other = png((50, 50), (1, 2, 3))
    gone = {**BOX, "sha256": hashlib.sha256(other).hexdigest()}
    messages = await turn_messages(drawing(store), "acme", turn(boxes=[gone]), {}, "en")
    assert messages == [{"role": "assistant", "content": "star"}]


async def stored(tenant: str, data: bytes) -> ConversationStore:
    store = ConversationStore(MemoryState(), ttl_s=60)
    conversation = await store.create(tenant, f"{tenant}/alice")
    await store.attach(conversation, {hashlib.sha256(data).hexdigest(): data})
    return store


async def test_a_drawing_decodes_its_image_once_for_both_copies(
    box_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await stored("acme", WHITE)
    decodes = count_decodes(monkeypatch)
    await turn_messages(drawing(store), "acme", turn(), {SHA: 1}, "en")
    assert decodes == [(120, 90)]  # the copy without boxes and the drawn one, from one decode
    files = sorted(path.name for path in (box_dir / tenant_folder("acme").name).iterdir())
    assert len(files) == 2 and "-boxes-" in files[0] and "-plain-" in files[1]
    decodes.clear()
    await turn_messages(drawing(store), "acme", turn(), {SHA: 1}, "en")
    assert decodes == []  # drawn already: nothing decoded


async def test_a_drawing_holds_its_cost_in_the_budget_while_it_runs(
    box_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await stored("acme", WHITE)
    chat = drawing(store)
    held: list[int] = []
    write_both: Callable[..., None] = chat_boxes._write_both

    def watched(*args: object) -> None:
        held.append(chat.budget.in_use)
        write_both(*args)

    monkeypatch.setattr(chat_boxes, "_write_both", watched)
    await drawn_file(chat, "acme", SHA, [BOX], {"star": PALETTE[0]}, 1)
    # the picture as decoded (RGB: 4 bytes a pixel), its RGB copy and that copy turned
    assert held == [120 * 90 * 4 * 3] == [boxes_view.cost_of(WHITE)]
    assert chat.budget.in_use == 0 and chat.budget.max_in_use == held[0]


async def test_a_drawing_that_never_fits_is_refused_and_the_text_remains(
    box_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = await stored("acme", WHITE)
    decodes = count_decodes(monkeypatch)
    small = drawing(store, capacity=120 * 90 * 4 * 3 - 1)
    with pytest.raises(ImageDecodeBudget) as refused:
        await drawn_file(small, "acme", SHA, [BOX], {"star": PALETTE[0]}, 2)
    assert refused.value.code == "image_decode_budget" and "Image 2 " in str(refused.value)
    with caplog.at_level(logging.INFO, logger="qwen_ui.web.chat_boxes"):
        messages = await turn_messages(small, "acme", turn(), {SHA: 2}, "en")
    assert messages == [{"role": "assistant", "content": "star (image 2)"}]
    assert decodes == [] and not any(box_dir.rglob("*.png"))  # refused before decoding
    lines = [r.getMessage() for r in caplog.records if r.name == "qwen_ui.web.chat_boxes"]
    assert lines == ["located image 2 not drawn: image_decode_budget"]


async def test_a_drawing_waits_for_a_busy_budget_then_gives_up_and_the_text_remains(
    box_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = await stored("acme", WHITE)
    busy = drawing(store, capacity=MiB, timeout_s=0.05)
    async with busy.budget.hold(MiB, 1):  # another decode holds it all
        with pytest.raises(DecodeBusy):
            await drawn_file(busy, "acme", SHA, [BOX], {"star": PALETTE[0]}, 1)
        with caplog.at_level(logging.INFO, logger="qwen_ui.web.chat_boxes"):
            messages = await turn_messages(busy, "acme", turn(), {SHA: 1}, "en")
    assert messages == [{"role": "assistant", "content": "star (image 1)"}]
    assert "located image 1 not drawn: busy_decoding" in caplog.messages
    # once the other decode ends, the drawing goes ahead
    _, image = await turn_messages(busy, "acme", turn(), {SHA: 1}, "en")
    assert "-boxes-" in image["content"]["path"] and busy.budget.in_use == 0


async def test_a_cancelled_drawing_stays_counted_until_its_thread_ends(
    box_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await stored("acme", WHITE)
    chat = drawing(store)
    started, release = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    write_both: Callable[..., None] = chat_boxes._write_both

    def slow(*args: object) -> None:
        loop.call_soon_threadsafe(started.set)
        asyncio.run_coroutine_threadsafe(release.wait(), loop).result()
        write_both(*args)

    monkeypatch.setattr(chat_boxes, "_write_both", slow)
    task = asyncio.create_task(drawn_file(chat, "acme", SHA, [BOX], {"star": PALETTE[0]}, 1))
    await started.wait()
    task.cancel()
    for _ in range(3):
        await asyncio.sleep(0)
    assert chat.budget.in_use > 0  # the thread still decodes: its bytes stay held
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert chat.budget.in_use == 0
