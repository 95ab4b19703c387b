"""Images in the prompt are labelled with their number in the whole conversation
("Picture 4: " before the image, as Qwen's chat template does with add_vision_id), so "the
second image" means the same in the prompt, the stages and the chat; a model that was
trained without labels (the demo) declares ``"vision_ids": false`` in its qwen_ui.json."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from qwen_ui.engine.engine import AskRequest, Engine
from qwen_ui.engine.events import Done, Event
from qwen_ui.engine.facts import Declared, read_declared
from qwen_ui.engine.pipelines import LanguagePipeline, Turn, messages
from qwen_ui.engine.status import EngineStatus
from qwen_ui.state import MemoryState
from qwen_ui.store import ModelStore
from tests.engine.conftest import TINY_ID, png, tiny_settings

RED, BLUE, GREEN = png(colour=(255, 0, 0)), png((80, 60), (0, 0, 255)), png((30, 90), (0, 200, 0))


def test_messages_label_each_image_with_its_number() -> None:
    turns = [Turn("How many?", 2, "two", first_image=3), Turn("And this one?", 1, first_image=5)]
    parts = [m["content"] for m in messages(turns) if m["role"] == "user"]
    assert parts[0] == [
        {"type": "text", "text": "Picture 3: "},
        {"type": "image"},
        {"type": "text", "text": "Picture 4: "},
        {"type": "image"},
        {"type": "text", "text": "How many?"},
    ]
    assert parts[1][0] == {"type": "text", "text": "Picture 5: "}


def test_messages_without_numbers_have_no_labels() -> None:
    parts = messages([Turn("How many?", 2)])[0]["content"]
    assert parts == [{"type": "image"}, {"type": "image"}, {"type": "text", "text": "How many?"}]


def test_declared_facts_default_to_a_production_model(tmp_path: Path) -> None:
    assert read_declared(tmp_path) == Declared(answers_without_images=True, vision_ids=True)
    (tmp_path / "qwen_ui.json").write_text('{"vision_ids": false, "other": 1}')
    assert read_declared(tmp_path) == Declared(answers_without_images=True, vision_ids=False)


def test_the_shipped_demo_model_declares_no_labels() -> None:
    from qwen_ui.demo.install import weights_dir

    for revision in ("bf16", "awq"):
        assert read_declared(weights_dir(revision)).vision_ids is False


async def make_engine(tmp_path: Path, model: Path, **settings: Any) -> Engine:
    store = ModelStore(tmp_path / "store")
    store.install(model, TINY_ID, "bf16")
    engine = Engine(tiny_settings(tmp_path, **settings), store, MemoryState(), EngineStatus())
    engine.start()
    return engine


@pytest.fixture
def prompts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The text of every prompt the engine builds, as the chat template renders it."""
    seen: list[str] = []
    build = LanguagePipeline.build_prompt

    def spy(self: LanguagePipeline, turns: list[Turn], embeddings: Any) -> Any:
        rendered = self.processor.apply_chat_template(
            messages(turns), tokenize=False, add_generation_prompt=True
        )
        seen.append(str(rendered))
        return build(self, turns, embeddings)

    monkeypatch.setattr(LanguagePipeline, "build_prompt", spy)
    return seen


async def collect(engine: Engine, request: AskRequest) -> list[Event]:
    return [event async for event in engine.ask(request)]


@pytest.fixture
async def labelled(tmp_path: Path, tiny_dirs: dict[str, Path]) -> AsyncIterator[Engine]:
    engine = await make_engine(tmp_path, tiny_dirs["bf16"], max_images=3)
    yield engine
    await engine.close()


async def test_follow_up_images_carry_their_conversation_numbers(
    labelled: Engine, prompts: list[str]
) -> None:
    conversation = (await labelled.conversations.create("demo", "demo/ann")).id
    first = await collect(labelled, AskRequest("demo", "Q1", [RED, BLUE], conversation, user="ann"))
    assert isinstance(first[-1], Done)
    assert "Picture 1: <|vision_start|>" in prompts[0]
    assert "Picture 2: <|vision_start|>" in prompts[0]
    second = await collect(labelled, AskRequest("demo", "Q2", [GREEN], conversation, user="ann"))
    assert isinstance(second[-1], Done)
    assert [p in prompts[1] for p in ("Picture 1: ", "Picture 2: ", "Picture 3: ")] == [1, 1, 1]
    # a third turn: the prompt (3 images at most) keeps only the latest turns, and the
    # images keep their numbers: the second turn's image is still "Picture 3"
    third = await collect(labelled, AskRequest("demo", "Q3", [RED], conversation, user="ann"))
    assert isinstance(third[-1], Done)
    assert "Picture 1: " not in prompts[2] and "Picture 2: " not in prompts[2]
    assert prompts[2].index("Picture 3: ") < prompts[2].index("Q2")
    assert prompts[2].index("Q2") < prompts[2].index("Picture 4: ") < prompts[2].index("Q3")


async def test_a_model_trained_without_labels_gets_none(
    tmp_path: Path, tiny_dirs: dict[str, Path], prompts: list[str]
) -> None:
    model = shutil.copytree(tiny_dirs["bf16"], tmp_path / "unlabelled")
    (model / "qwen_ui.json").write_text('{"vision_ids": false}')
    engine = await make_engine(tmp_path, model)
    try:
        done = (await collect(engine, AskRequest("demo", "Q1", [RED, BLUE])))[-1]
        assert isinstance(done, Done)
        assert "Picture" not in prompts[0] and prompts[0].count("<|vision_start|>") == 2
    finally:
        await engine.close()


async def test_labels_are_counted_in_the_request_shape(labelled: Engine) -> None:
    plain = Turn("Q1", 2)
    served = await labelled.served_model()
    with_labels = served.text_tokens([Turn("Q1", 2, first_image=1)])
    assert with_labels > served.text_tokens([plain])
    shape = await labelled.shape(AskRequest("demo", "Q1"), [(64, 48), (64, 48)])
    assert shape.text_tokens == with_labels


async def test_a_stateless_request_numbers_its_turns_images_from_one(
    labelled: Engine, prompts: list[str]
) -> None:
    from qwen_ui.engine.engine import PastTurn
    from qwen_ui.engine.events import Stage

    request = AskRequest("demo", "Q2", [BLUE], history=[PastTurn("Q1", "A1", [RED])])
    events = await collect(labelled, request)
    assert isinstance(events[-1], Done)
    encoding = [
        (e.index, e.total) for e in events if isinstance(e, Stage) and e.stage == "encoding"
    ]
    assert encoding == [(1, 2), (2, 2)]
    assert prompts[0].index("Picture 1: ") < prompts[0].index("Q1")
    assert prompts[0].index("A1") < prompts[0].index("Picture 2: ") < prompts[0].index("Q2")
