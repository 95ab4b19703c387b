"""Boxes through the engine: the model's answer (forced here, the tiny models are random)
is parsed in its family's format and the ``done`` event carries the boxes on the files'
own pixels, for the processor's real resize."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from PIL import Image

from qwen_ui.admission.tokens import Geometry, resized
from qwen_ui.engine.conversations import owner_of
from qwen_ui.engine.engine import AskRequest, Engine, PastTurn
from qwen_ui.engine.events import Done, Token
from qwen_ui.engine.status import EngineStatus
from qwen_ui.state import MemoryState
from qwen_ui.store import ModelStore
from tests.engine.conftest import TINY_ID, png, tiny_settings
from tests.engine.support import build_family_model, force_answer

TINY = Geometry(14, 2, 2, 3136, 112 * 112)  # tiny_settings' bounds and the tiny processor


def jpeg(size: tuple[int, int], orientation: int = 1) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    Image.new("RGB", size, (250, 250, 250)).save(buf, "JPEG", exif=exif.tobytes())
    return buf.getvalue()


async def done_of(
    engine: Engine, images: Sequence[bytes], conversation_id: str | None = None
) -> tuple[Done, str]:
    request = AskRequest(
        tenant="demo",
        question="Where is the red circle?",
        images=images,
        conversation_id=conversation_id,
    )
    events = [event async for event in engine.ask(request)]
    done = events[-1]
    assert isinstance(done, Done), done
    streamed = "".join(e.text for e in events if isinstance(e, Token))
    return done, streamed


async def test_qwen25_box_in_resized_pixels_comes_back_on_the_turned_file(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored = (300, 200)  # EXIF 6: displayed 200 wide, 300 high
    width, height = resized(200, 300, TINY)  # what the processor made of the upright image
    answer = json.dumps([{"bbox_2d": [0, 0, width / 2, height / 4], "label": "red circle"}])
    force_answer(monkeypatch, engine, f"```json\n{answer}\n```")
    done, streamed = await done_of(engine, [jpeg(stored, orientation=6)])
    # upright (0, 0)-(100, 75); turned back: x = v, y = H - u on the 300 x 200 file
    assert done.boxes == [{"image": 1, "label": "red circle", "box": [0, 100, 75, 200]}]
    assert done.answer == streamed and "bbox_2d" in done.answer  # the model's own words
    assert done.answer_text == "red circle"
    assert json.loads(done.to_json())["boxes"] == done.boxes


async def test_several_images_box_without_image_number_stays_in_the_text(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    width, height = resized(64, 48, TINY)
    items = [
        {"bbox_2d": [0, 0, width, height], "label": "circle", "image": 2},
        {"bbox_2d": [0, 0, 10, 10], "label": "which image?"},
        {"bbox_2d": [width * 2, 0, width * 3, 10], "label": "outside", "image": 1},
    ]
    force_answer(monkeypatch, engine, json.dumps(items))
    done, _ = await done_of(engine, [png(), png((64, 48), (0, 0, 255))])
    assert done.boxes == [{"image": 2, "label": "circle", "box": [0, 0, 64, 48]}]
    assert '"which image?"' in done.answer_text
    assert done.answer_text.startswith("circle, outside")


async def test_an_answer_without_boxes_is_left_alone(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    force_answer(monkeypatch, engine, 'It is {"bbox_2d": [1, 2, 3]} maybe.')
    done, _ = await done_of(engine, [png()])
    assert done.boxes == [] and done.answer_text == done.answer


async def test_no_image_no_boxes(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    force_answer(monkeypatch, engine, '{"bbox_2d": [1, 2, 3, 4], "label": "x"}')
    done, _ = await done_of(engine, [])
    assert done.boxes == []


async def test_a_retry_locates_again_on_the_turns_own_images(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regenerate and edit take the turn back (its images pending again) and ask with no
    new image: the boxes still land on the turn's image, numbered in the conversation."""
    width, height = resized(64, 48, TINY)
    force_answer(monkeypatch, engine, json.dumps({"bbox_2d": [0, 0, width, height]}))
    first, _ = await done_of(engine, [png()])
    conversation_id = first.conversation_id
    second, _ = await done_of(engine, [png((64, 48), (0, 0, 255))], conversation_id)
    assert second.boxes == [{"image": 2, "label": "", "box": [0, 0, 64, 48]}]
    store = engine.conversations
    await store.drop_last_turn(await store.get(owner_of("demo", ""), conversation_id))
    again, _ = await done_of(engine, [], conversation_id)
    assert again.images == 0 and again.images_seen == 2
    assert again.boxes == second.boxes


async def test_a_follow_up_without_images_locates_on_the_conversations_image(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    width, height = resized(64, 48, TINY)
    force_answer(monkeypatch, engine, "Nothing to locate.")
    first, _ = await done_of(engine, [png()])
    answer = json.dumps({"bbox_2d": [0, 0, width / 2, height], "label": "red circle"})
    force_answer(monkeypatch, engine, answer)
    follow_up, _ = await done_of(engine, [], first.conversation_id)
    assert follow_up.boxes == [{"image": 1, "label": "red circle", "box": [0, 0, 32, 48]}]


async def test_a_follow_up_over_several_earlier_images_needs_their_numbers(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    width, height = resized(64, 48, TINY)
    force_answer(monkeypatch, engine, "Two images.")
    first, _ = await done_of(engine, [png(), png((64, 48), (0, 0, 255))])
    items = [
        {"bbox_2d": [0, 0, width, height], "label": "named", "image": 2},
        {"bbox_2d": [0, 0, 10, 10], "label": "which image?"},
        {"bbox_2d": [0, 0, 10, 10], "label": "no such image", "image": 3},
    ]
    force_answer(monkeypatch, engine, json.dumps(items))
    follow_up, _ = await done_of(engine, [], first.conversation_id)
    assert follow_up.boxes == [{"image": 2, "label": "named", "box": [0, 0, 64, 48]}]
    assert '"which image?"' in follow_up.answer_text and '"no such image"' in follow_up.answer_text


async def test_a_stateless_requests_boxes_count_the_images_of_its_messages(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    width, height = resized(64, 48, TINY)
    force_answer(monkeypatch, engine, json.dumps({"bbox_2d": [0, 0, width, height]}))
    earlier = PastTurn("What is this?", "A circle.", [png((32, 32))])
    request = AskRequest(tenant="demo", question="Where is it?", images=[png()], history=[earlier])
    events = [event async for event in engine.ask(request)]
    done = events[-1]
    assert isinstance(done, Done), done
    assert done.boxes == [{"image": 2, "label": "", "box": [0, 0, 64, 48]}]


@pytest.fixture(scope="module")
def family_store(tmp_path_factory: pytest.TempPathFactory) -> ModelStore:
    store = ModelStore(tmp_path_factory.mktemp("store"))
    for family in ("qwen2_vl", "qwen3_vl"):
        path = build_family_model(family, tmp_path_factory.mktemp(family) / "model")
        store.install(path, TINY_ID, family)
    return store


@pytest.fixture
async def family_engine(
    request: pytest.FixtureRequest, tmp_path: Path, family_store: ModelStore
) -> AsyncIterator[Engine]:
    settings = tiny_settings(tmp_path, str(request.param), max_pixels=128 * 128)
    eng = Engine(settings, family_store, MemoryState(), EngineStatus())
    eng.start()
    yield eng
    await eng.close()


@pytest.mark.parametrize("family_engine", ["qwen2_vl"], indirect=True)
async def test_qwen2_tags_survive_detokenizing_and_map_from_thousandths(
    family_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer = (
        "The <|object_ref_start|>red circle<|object_ref_end|>"
        "<|box_start|>(100,250),(500,1000)<|box_end|> is there."
    )
    force_answer(monkeypatch, family_engine, answer)
    done, streamed = await done_of(family_engine, [png((200, 80))])
    assert done.answer == streamed == answer
    assert done.answer_text == "The red circle is there."
    assert done.boxes == [{"image": 1, "label": "red circle", "box": [20, 20, 100, 80]}]


@pytest.mark.parametrize("family_engine", ["qwen3_vl"], indirect=True)
async def test_qwen3_json_in_thousandths(
    family_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    force_answer(monkeypatch, family_engine, '[{"bbox_2d": [0, 500, 250, 1000], "label": "星"}]')
    done, _ = await done_of(family_engine, [png((200, 80))])
    assert done.boxes == [{"image": 1, "label": "星", "box": [0, 40, 50, 80]}]
    assert done.answer_text == "星"
