"""The engine and the server's conversation: images attached by a turn stay with it after
a stop, a failure or a missing question; images are numbered across the conversation; a
model that cannot answer without images refuses before it runs."""

from __future__ import annotations

import shutil
from contextlib import aclosing
from pathlib import Path

from qwen_ui.engine.engine import AskRequest, Engine
from qwen_ui.engine.events import Done, Event, Failed, Stage
from qwen_ui.engine.status import EngineStatus
from qwen_ui.state import MemoryState
from qwen_ui.store import ModelStore
from tests.engine.conftest import TINY_ID, png, tiny_settings

RED, BLUE, GREEN = png(colour=(255, 0, 0)), png((80, 60), (0, 0, 255)), png((30, 90), (0, 200, 0))


async def collect(engine: Engine, request: AskRequest) -> list[Event]:
    return [event async for event in engine.ask(request)]


def staged(events: list[Event], name: str) -> list[tuple[int, int, bool]]:
    return [
        (e.index, e.total, e.cached) for e in events if isinstance(e, Stage) and e.stage == name
    ]


async def new_conversation(engine: Engine) -> str:
    return (await engine.conversations.create("demo", "demo/ann")).id


def ask(question: str, conversation_id: str, *images: bytes) -> AskRequest:
    return AskRequest("demo", question, images, conversation_id, user="ann")


async def test_stop_during_encoding_keeps_the_images_for_the_next_question(
    engine: Engine,
) -> None:
    conversation = await new_conversation(engine)
    seen: list[Event] = []
    async with aclosing(engine.ask(ask("Which is red?", conversation, RED, BLUE))) as events:
        async for event in events:
            seen.append(event)
            if isinstance(event, Stage) and event.stage == "encoding":
                break  # Stop: the iterator is closed during encoding
    assert staged(seen, "decoding") == [(1, 2, False), (2, 2, False)]
    held = await engine.conversations.get("demo/ann", conversation)
    assert len(held.pending) == 2 and held.turns == []
    idle = engine.worker.submit(lambda _job: None)  # the cancelled job has left the worker
    async for _ in idle.events():
        pass
    again = await collect(engine, ask("Which is red?", conversation))
    assert [(i, n) for i, n, _ in staged(again, "encoding")] == [(1, 2), (2, 2)]
    assert staged(again, "encoding")[0][2] is True  # image 1 was encoded before the stop
    done = again[-1]
    assert isinstance(done, Done) and done.images_seen == 2 and done.images == 0
    held = await engine.conversations.get("demo/ann", conversation)
    assert held.pending == [] and len(held.turns[0].images) == 2


async def test_image_only_submit_then_a_question_sees_the_images(engine: Engine) -> None:
    conversation = await new_conversation(engine)
    refused = await collect(engine, ask("  ", conversation, RED, BLUE))
    failed = refused[-1]
    assert isinstance(failed, Failed) and failed.code == "no_question"
    assert failed.conversation_id == conversation  # it holds the images
    answered = await collect(engine, ask("Which is red?", conversation))
    assert [i for i, _n, _c in staged(answered, "encoding")] == [1, 2]
    assert isinstance(answered[-1], Done)


async def test_images_are_numbered_across_the_conversation(engine: Engine) -> None:
    conversation = await new_conversation(engine)
    first = await collect(engine, ask("What shapes?", conversation, RED, BLUE))
    assert isinstance(first[-1], Done)
    second = await collect(engine, ask("And this one?", conversation, GREEN))
    assert staged(second, "decoding") == [(3, 3, False)]
    assert [(i, n) for i, n, _ in staged(second, "encoding")] == [(1, 3), (2, 3), (3, 3)]
    label = next(e for e in second if isinstance(e, Stage) and e.stage == "decoding")
    assert label.label("en") == "Decoding image 3/3"


async def test_a_rejected_image_is_not_kept(engine: Engine) -> None:
    conversation = await new_conversation(engine)
    refused = await collect(engine, ask("What?", conversation, RED, b"%PDF-1.7"))
    failed = refused[-1]
    assert isinstance(failed, Failed) and failed.code == "image_unsupported"
    assert failed.conversation_id is None
    assert (await engine.conversations.get("demo/ann", conversation)).images == []


async def test_another_user_cannot_continue_the_conversation(engine: Engine) -> None:
    conversation = await new_conversation(engine)
    other = AskRequest("demo", "What?", (), conversation, user="bob")
    failed = (await collect(engine, other))[-1]
    assert isinstance(failed, Failed) and failed.status == 404


async def test_a_model_that_needs_images_refuses_a_question_without_one(
    tmp_path: Path, tiny_dirs: dict[str, Path]
) -> None:
    model = shutil.copytree(tiny_dirs["bf16"], tmp_path / "needs-image")
    (model / "qwen_ui.json").write_text('{"answers_without_images": false}')
    store = ModelStore(tmp_path / "store")
    store.install(model, TINY_ID, "bf16")
    engine = Engine(tiny_settings(tmp_path), store, MemoryState(), EngineStatus())
    engine.start()
    try:
        events = await collect(engine, AskRequest("demo", "How many shapes?", lang="zh"))
        failed = events[-1]
        assert isinstance(failed, Failed) and failed.code == "no_image"
        assert failed.status == 400 and "图片" in failed.message
        assert not engine.pipelines.is_loaded  # refused before the model ran
    finally:
        await engine.close()


async def test_a_model_that_answers_without_images_says_none_was_used(engine: Engine) -> None:
    done = (await collect(engine, AskRequest("demo", "Hello?")))[-1]
    assert isinstance(done, Done) and done.images_seen == 0
