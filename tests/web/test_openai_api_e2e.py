"""The real ``openai`` SDK against a real ``qwen-ui serve`` on the shipped demo model:
non-streaming and streaming, one and three images, a grounding answer's boxes, a follow-up
turn with the image in an earlier message, and the error shapes as the SDK sees them; the
answers are right."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from qwen_ui.auth.tenants import Limits
from qwen_ui.auth.tokens import add_token, new_token
from qwen_ui.demo import scenes
from qwen_ui.settings import DEMO_MODEL_ID, Settings
from tests.support.auth import add_tenants, local_tenant
from tests.support.grounding import boxes_right
from tests.support.server import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


SMALL_TOKEN: dict[str, str] = {}


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    """A demo-model server and an API token of its 'demo' tenant."""
    home = tmp_path_factory.mktemp("home")
    token, server = start_demo_server(home)
    yield server, token
    server.stop()


def start_demo_server(home: Path, **env: str) -> tuple[str, ServerProcess]:
    """A demo-model server whose tenants are 'demo' and 'small' (one question a day, its
    token in SMALL_TOKEN); returns the demo tenant's API token and the server."""
    token, record = new_token("openai-sdk")
    SMALL_TOKEN["small"], small_record = new_token("quota")
    small = local_tenant("small").model_copy(update={"limits": Limits(questions_per_day=1)})
    add_tenants(
        home / "tenants.toml",
        add_token(local_tenant("demo"), record),
        add_token(small, small_record),
    )
    server = ServerProcess(
        home,
        env={
            "QWEN_UI_DEVICE": "cpu",
            "QWEN_UI_MAX_IMAGE_BYTES": str(256 * 1024),
            "GRADIO_ANALYTICS_ENABLED": "False",
            **env,
        },
    )
    try:
        server.wait_for("/login", timeout=240)
    except (RuntimeError, TimeoutError):
        server.stop()
        raise
    return token, server


def demo_model_id() -> str:
    return f"{DEMO_MODEL_ID}@{Settings().model_revision}"


OPEN_CLIENTS: list[openai.OpenAI] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while OPEN_CLIENTS:
        OPEN_CLIENTS.pop().close()


def client_for(server: ServerProcess, token: str) -> openai.OpenAI:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=token, max_retries=0, timeout=120)
    OPEN_CLIENTS.append(client)
    return client


def image_parts(sample: scenes.Sample) -> list[dict[str, Any]]:
    return [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + b64(data)}}
        for data in sample.png_bytes()
    ]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def ask(sample: scenes.Sample) -> list[Any]:
    text = {"type": "text", "text": sample.question}
    return [{"role": "user", "content": [*image_parts(sample), text]}]


def first_sample(kind: str, images: int, lang: str = "en") -> scenes.Sample:
    """The first held-out sample of ``kind`` with that many images (not chosen by outcome)."""
    return next(
        s
        for s in scenes.held_out(200, seed=0, kinds=(kind,))
        if len(s.scenes) == images and s.lang == lang
    )


def test_models_names_the_installed_demo(demo_server: tuple[ServerProcess, str]) -> None:
    server, token = demo_server
    assert [m.id for m in client_for(server, token).models.list().data] == [demo_model_id()]


def test_one_image_question_is_answered_right(demo_server: tuple[ServerProcess, str]) -> None:
    server, token = demo_server
    sample = first_sample("count", 1)
    reply = client_for(server, token).chat.completions.create(
        model=demo_model_id(), messages=ask(sample)
    )
    assert reply.choices[0].message.content == sample.answer, sample.question
    assert reply.choices[0].finish_reason == "stop"


def test_boxes_come_back_around_the_asked_shape(demo_server: tuple[ServerProcess, str]) -> None:
    """The demo model locates; the ``boxes`` extension gives its box in the file's pixels."""
    server, token = demo_server
    sample = first_sample("grounding", 1)
    reply = client_for(server, token).chat.completions.create(
        model=demo_model_id(), messages=ask(sample)
    )
    message = reply.choices[0].message
    assert message.content and "bbox_2d" in message.content  # the model's own JSON
    boxes = (message.model_extra or {})["boxes"]
    assert boxes_right(boxes, sample), (sample.question, message.content, boxes)


def test_three_images_stream_the_right_answer(demo_server: tuple[ServerProcess, str]) -> None:
    server, token = demo_server
    sample = first_sample("multi_count", 3)
    stream = client_for(server, token).chat.completions.create(
        model=demo_model_id(),
        messages=ask(sample),
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"qwen_ui": {"stages": True}},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == sample.answer, sample.question
    stages = [c.model_extra["qwen_ui"] for c in chunks if not c.choices and c.model_extra]
    decoded = [s["index"] for s in stages if s.get("stage") == "decoding"]
    assert decoded == [1, 2, 3]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 1


def test_follow_up_sees_the_image_of_an_earlier_turn(
    demo_server: tuple[ServerProcess, str],
) -> None:
    server, token = demo_server
    sample = next(
        s
        for s in (scenes.with_follow_up(x) for x in scenes.held_out(60, seed=0, kinds=("count",)))
        if s.follow_ups and s.lang == "en"
    )
    client = client_for(server, token)
    first = client.chat.completions.create(model=demo_model_id(), messages=ask(sample))
    assert first.choices[0].message.content == sample.answer
    follow = sample.follow_ups[0]
    messages = [
        *ask(sample),
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": follow.question},
    ]
    second = client.chat.completions.create(model=demo_model_id(), messages=messages)
    assert second.choices[0].message.content == follow.answer, follow.question


def test_errors_reach_the_sdk_typed(demo_server: tuple[ServerProcess, str]) -> None:
    server, token = demo_server
    sample = first_sample("count", 1)
    body: dict[str, Any] = {"model": demo_model_id(), "messages": ask(sample)}
    with pytest.raises(openai.AuthenticationError):
        client_for(server, "not-a-token").chat.completions.create(**body)
    with pytest.raises(openai.BadRequestError) as bad:
        client_for(server, token).chat.completions.create(**body, n=2)
    assert bad.value.code == "unsupported_parameter" and bad.value.param == "n"
    huge = {"url": "data:image/png;base64," + b64(bytes(300 * 1024))}
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": huge}]}]
    with pytest.raises(openai.APIStatusError) as too_large:
        client_for(server, token).chat.completions.create(model=demo_model_id(), messages=messages)
    assert too_large.value.status_code == 413 and too_large.value.code == "image_too_large"
    small = client_for(server, SMALL_TOKEN["small"])
    small.chat.completions.create(**body)
    with pytest.raises(openai.RateLimitError) as limited:
        small.chat.completions.create(**body)
    assert limited.value.code == "quota_exceeded"
    assert int(limited.value.response.headers["retry-after"]) >= 1
