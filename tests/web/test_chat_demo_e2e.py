"""The shipped demo model over a real ``qwen-ui serve`` with embedded defaults (a fresh
home: the demo is installed on the first question): a 3-image question through
gradio_client streams its stages in order, then the correct answer; a grounding question
through ``/api/v1/ask`` ends with a ``done`` event whose box surrounds the asked shape."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from gradio_client import handle_file

from qwen_ui.demo import scenes
from tests.support.grounding import boxes_right, grounding
from tests.support.server import ServerProcess, log_in_with_form
from tests.web.test_chat_e2e import THREE_IMAGE_STAGES, chat_client, follow, text_of

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path_factory.mktemp("home"),
        env={"QWEN_UI_DEVICE": "cpu", "GRADIO_ANALYTICS_ENABLED": "False"},
    )
    process.wait_for("/login")
    yield process
    process.stop()


def first_three_image_sample() -> scenes.Sample:
    """The first 3-image question of the held-out set (not chosen by outcome)."""
    return next(s for s in scenes.held_out(60, seed=0) if len(s.scenes) == 3)


@dataclass(frozen=True)
class Asked:
    sample: scenes.Sample
    titles: list[str]  # the stage message's titles, in order, repeats collapsed
    answer: str


@pytest.fixture(scope="module")
def asked(server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Asked:
    """One 3-image question through gradio_client, its stages and its final answer."""
    sample, tmp_path = first_three_image_sample(), tmp_path_factory.mktemp("ask")
    paths = []
    for i, image in enumerate(sample.images()):
        path = tmp_path / f"scene{i}.png"
        image.save(path)
        paths.append(handle_file(str(path)))
    with httpx.Client(base_url=server.url, follow_redirects=False, timeout=60) as session:
        log_in_with_form(session, "demo", "demo", server.demo_password())
        client = chat_client(server, session, tmp_path)
        message = {"text": sample.question, "files": paths}
        titles, _, final = follow(client.submit(message, [], None, "en", "", api_name="/on_submit"))
        client.close()
    return Asked(sample, titles, text_of(final[-1]).strip())


def test_three_image_question_streams_stages_then_a_short_answer(asked: Asked) -> None:
    assert [t for t in asked.titles if not t.startswith(("Working", "Done"))] == (
        THREE_IMAGE_STAGES
    )
    assert asked.titles[-1].startswith("Done in")
    assert asked.sample.kind == "multi_count" and asked.answer.isdigit(), asked.answer


def test_three_image_question_gets_the_right_answer(asked: Asked) -> None:
    assert asked.answer == asked.sample.answer, (asked.sample.question, asked.sample.answer)


def test_api_done_event_boxes_the_asked_shape(server: ServerProcess) -> None:
    """The model's own box, mapped back to the file's pixels, with its label and image."""
    case = grounding()
    files = [("images", ("scene.png", case.sample.png_bytes()[0], "image/png"))]
    with httpx.Client(base_url=server.url, follow_redirects=False, timeout=120) as session:
        log_in_with_form(session, "demo", "demo", server.demo_password())
        session.headers["origin"] = server.url  # as the page's own requests do
        data = {"question": case.sample.question}
        response = session.post("/api/v1/ask", data=data, files=files)
    assert response.status_code == 200, response.text
    done = json.loads(response.text.strip().splitlines()[-1])
    assert done["type"] == "done", done
    assert boxes_right(done["boxes"], case.sample), (done["answer"], done["boxes"])
    assert case.label in done["answer_text"] and "bbox_2d" not in done["answer_text"]
