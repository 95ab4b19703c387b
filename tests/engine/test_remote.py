"""The remote engine against the Model Studio fake: stages, tokens, usage, the request it
sends (resized data URLs with pixel bounds, the model, sampling), conversations on our
side, typed 502/504/503 errors, health, cancellation and admission by count."""

from __future__ import annotations

import asyncio
import base64
import io
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from qwen_ui.admission.controller import unlimited
from qwen_ui.admission.count import CountGate
from qwen_ui.engine.engine import AskOptions, AskRequest, PastTurn
from qwen_ui.engine.events import Done, Event, Failed, Stage, Token
from qwen_ui.engine.remote import RemoteEngine
from qwen_ui.engine.remote_client import RemoteClient
from qwen_ui.engine.remote_images import fit_size
from qwen_ui.settings import Settings
from qwen_ui.state import MemoryState
from tests.engine.conftest import png
from tests.support.model_studio import KEY, MODEL, ModelStudioFake

BASE = "https://dashscope.aliyuncs.com/compatible-mode/v1"


def remote_engine(
    tmp_path: Path, fake: ModelStudioFake, key: str = KEY, **extra: Any
) -> RemoteEngine:
    values: dict[str, Any] = {
        "home": tmp_path,
        "engine": "openai",
        "remote_base_url": BASE,
        "remote_model": MODEL,
        "remote_api_key": key,
        "min_pixels": 56 * 56,
        "max_pixels": 112 * 112,
        **extra,
    }
    tenant_limit = values.pop("tenant_limit", unlimited)
    settings = Settings(**values)
    client = RemoteClient(
        BASE, settings.remote_api_key, settings.remote_timeout_s, fake.transport()
    )
    gate = CountGate.from_settings(settings, tenant_limit)
    engine = RemoteEngine(settings, MemoryState(), client=client, gate=gate)
    engine.start()
    return engine


async def collect(engine: RemoteEngine, request: AskRequest) -> list[Event]:
    return [event async for event in engine.ask(request)]


def decoded(url: str) -> Image.Image:
    return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))


async def test_streams_stages_tokens_and_usage(tmp_path: Path) -> None:
    fake = ModelStudioFake()
    engine = remote_engine(tmp_path, fake)
    request = AskRequest(
        "demo", "How many circles?", [png((400, 300))], options=AskOptions(7, 0.0, 0.9, 5)
    )
    events = await collect(engine, request)
    stages = [e.stage for e in events if isinstance(e, Stage)]
    assert stages == ["decoding", "sending", "waiting", "answering"]
    assert "".join(e.text for e in events if isinstance(e, Token)) == "There are 3 circles."
    done = events[-1]
    assert isinstance(done, Done) and done.answer == "There are 3 circles."
    assert (done.prompt_tokens, done.completion_tokens) == (1234, 5)
    body = fake.bodies[0]
    assert body["model"] == MODEL and body["stream"] is True
    assert (body["max_tokens"], body["top_p"], body["seed"]) == (7, 0.9, 5)
    assert body["stream_options"] == {"include_usage": True}
    part = body["messages"][0]["content"][0]
    assert (part["min_pixels"], part["max_pixels"]) == (56 * 56, 112 * 112)
    image = decoded(part["image_url"]["url"])
    assert image.size == fit_size(400, 300, 56 * 56, 112 * 112)
    assert image.size[0] * image.size[1] <= 112 * 112 and image.size[0] % 28 == 0
    assert engine.health.state == "up"
    await engine.close()


async def test_follow_up_resends_earlier_images_from_our_conversation(tmp_path: Path) -> None:
    fake = ModelStudioFake()
    engine = remote_engine(tmp_path, fake)
    first = await collect(engine, AskRequest("demo", "How many?", [png()]))
    done = first[-1]
    assert isinstance(done, Done) and done.conversation_id and done.images_seen == 1
    follow = AskRequest("demo", "And red?", conversation_id=done.conversation_id)
    later = (await collect(engine, follow))[-1]
    assert isinstance(later, Done) and later.images_seen == 1  # the first turn's image
    messages = fake.bodies[1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[0]["content"][0]["type"] == "image_url"
    assert messages[1]["content"] == "There are 3 circles."
    assert messages[2]["content"] == [{"type": "text", "text": "And red?"}]
    # stateless history (the /v1 API): sent along, nothing stored
    stateless = AskRequest("demo", "Again?", history=[PastTurn("How many?", "3", [png()])])
    end = (await collect(engine, stateless))[-1]
    assert isinstance(end, Done) and end.conversation_id == "" and end.images_seen == 1
    alone = (await collect(engine, AskRequest("demo", "Hello?")))[-1]
    assert isinstance(alone, Done) and alone.images_seen == 0
    assert fake.bodies[2]["messages"][0]["content"][0]["type"] == "image_url"
    await engine.close()


@pytest.mark.parametrize(
    ("mode", "status", "code"),
    [
        ("bad_request", 502, "remote_error"),
        ("mid_stream_error", 502, "remote_error"),
        ("throttled", 503, "remote_busy"),
        ("timeout", 504, "remote_timeout"),
    ],
)
async def test_remote_failures_are_typed(tmp_path: Path, mode: str, status: int, code: str) -> None:
    engine = remote_engine(tmp_path, ModelStudioFake(mode=mode))
    failed = (await collect(engine, AskRequest("demo", "How many?", [png()])))[-1]
    assert isinstance(failed, Failed) and (failed.status, failed.code) == (status, code)
    if mode == "bad_request":
        assert "invalid_parameter_error" in failed.message
    if mode == "throttled":
        assert failed.retry_after is not None
    await engine.close()


async def test_wrong_key_is_a_502_and_the_key_is_never_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "sk-wrong-but-secret-987654321"
    engine = remote_engine(tmp_path, ModelStudioFake(), key=secret)
    failed = (await collect(engine, AskRequest("demo", "How many?", [png()])))[-1]
    assert isinstance(failed, Failed) and failed.status == 502
    assert "invalid_api_key" in failed.message
    assert secret not in caplog.text and secret not in failed.message
    assert secret not in repr(engine.settings)
    await engine.close()


async def test_unreachable_remote_then_recovery(tmp_path: Path) -> None:
    fake = ModelStudioFake()
    down = True

    def handler(request: httpx.Request) -> httpx.Response:
        if down:
            raise httpx.ConnectError("connection refused", request=request)
        return fake.handle(request)

    settings_engine = remote_engine(tmp_path, fake)
    client = RemoteClient(
        BASE, settings_engine.settings.remote_api_key, 5.0, httpx.MockTransport(handler)
    )
    gate = CountGate.from_settings(settings_engine.settings)
    engine = RemoteEngine(settings_engine.settings, MemoryState(), client=client, gate=gate)
    failed = (await collect(engine, AskRequest("demo", "How many?", [png()])))[-1]
    assert isinstance(failed, Failed) and (failed.status, failed.code) == (
        502,
        "remote_unreachable",
    )
    assert engine.health.state == "down"
    down = False
    await engine.probe()
    assert engine.health.state == "up"
    assert isinstance((await collect(engine, AskRequest("demo", "How many?", [png()])))[-1], Done)
    await engine.close()
    await settings_engine.close()


async def test_closing_the_iterator_closes_the_remote_stream(tmp_path: Path) -> None:
    fake = ModelStudioFake()
    engine = remote_engine(tmp_path, fake)
    events = engine.ask(AskRequest("demo", "How many?", [png()]))
    async for event in events:
        if isinstance(event, Token):
            break
    await events.aclose()
    assert fake.closed == [True]
    assert engine.gate.active == 0
    await engine.close()


async def test_admission_by_count_queues_the_second_question(tmp_path: Path) -> None:
    fake = ModelStudioFake()
    engine = remote_engine(tmp_path, fake, remote_max_concurrency=1)
    first = engine.ask(AskRequest("demo", "How many?", [png()]))
    async for event in first:
        if isinstance(event, Stage) and event.stage == "sending":
            break  # holds the only slot
    second = asyncio.ensure_future(collect(engine, AskRequest("demo", "And?", [png()])))
    await asyncio.sleep(0.05)
    assert engine.gate.waiting == 1
    rest = [event async for event in first]
    assert isinstance(rest[-1], Done)
    events = await second
    queued = [e for e in events if isinstance(e, Stage) and e.stage == "queued"]
    assert [q.ahead for q in queued] == [0] and isinstance(events[-1], Done)
    assert engine.gate.active == 0
    await engine.close()


async def until_stage(events: Any, stage: str) -> None:
    async for event in events:
        if isinstance(event, Stage) and event.stage == stage:
            return
    raise AssertionError(f"no {stage} stage")


async def test_tenant_over_its_concurrent_limit_waits_others_pass(tmp_path: Path) -> None:
    fake = ModelStudioFake()
    limits = {"acme": 1, "other": 1}
    engine = remote_engine(tmp_path, fake, tenant_limit=limits.__getitem__)
    first = engine.ask(AskRequest("acme", "How many?", [png()]))
    await until_stage(first, "sending")  # acme holds its only slot (of 4 in all)
    second = asyncio.ensure_future(collect(engine, AskRequest("acme", "And?", [png()])))
    await asyncio.sleep(0.05)
    assert (engine.gate.waiting, engine.gate.inflight("acme")) == (1, 1)
    other = await collect(engine, AskRequest("other", "How many?", [png()]))
    assert isinstance(other[-1], Done)  # another tenant overtakes the waiting one
    assert not second.done()
    rest = [event async for event in first]
    assert isinstance(rest[-1], Done)
    events = await second
    queued = [e for e in events if isinstance(e, Stage) and e.stage == "queued"]
    assert [q.ahead for q in queued] == [0] and isinstance(events[-1], Done)
    assert (engine.gate.active, engine.gate.waiting) == (0, 0)
    assert len(fake.bodies) == 3
    await engine.close()


async def test_tenant_over_its_limit_gets_the_typed_busy_error(tmp_path: Path) -> None:
    fake = ModelStudioFake()
    engine = remote_engine(tmp_path, fake, tenant_limit=lambda t: 1, queue_timeout_s=0.2)
    first = engine.ask(AskRequest("acme", "How many?", [png()]))
    await until_stage(first, "sending")
    events = await collect(engine, AskRequest("acme", "And?", [png()]))
    failed = events[-1]
    assert isinstance(failed, Failed)  # the local engine's busy error, with Retry-After
    assert (failed.code, failed.status) == ("busy_wait_timeout", 503)
    assert failed.retry_after is not None and failed.retry_after > 0
    assert len(fake.bodies) == 0  # nothing was sent for it
    await first.aclose()
    assert (engine.gate.active, engine.gate.inflight("acme")) == (0, 0)
    assert isinstance((await collect(engine, AskRequest("acme", "Now?", [png()])))[-1], Done)
    await engine.close()


def test_fit_size_matches_the_qwen_processor() -> None:
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    for width, height, low, high in [
        (1920, 1080, 3136, 1_003_520),
        (10, 10, 3136, 1_003_520),
        (400, 300, 56 * 56, 112 * 112),
        (3000, 200, 3136, 200_000),
    ]:
        h, w = smart_resize(height, width, 28, low, high)
        assert fit_size(width, height, low, high) == (w, h)
