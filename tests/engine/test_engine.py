from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from qwen_ui.engine import images as image_checks
from qwen_ui.engine.engine import AskOptions, AskRequest, Engine
from qwen_ui.engine.events import Done, Event, Failed, Stage, Token
from qwen_ui.engine.metrics import EngineMetrics
from qwen_ui.engine.shapes import AskShape, Fit, ModelFacts
from qwen_ui.engine.status import EngineState, EngineStatus
from qwen_ui.state import MemoryState
from qwen_ui.store import ModelStore
from tests.engine.conftest import png, tiny_settings


async def collect(engine: Engine, request: AskRequest) -> list[Event]:
    return [event async for event in engine.ask(request)]


def ask(
    question: str = "What shape is in the picture?", images: Sequence[bytes] = (), **kw: Any
) -> AskRequest:
    return AskRequest(tenant=kw.pop("tenant", "demo"), question=question, images=images, **kw)


def final(events: list[Event]) -> Event:
    return events[-1]


def stages(events: list[Event]) -> list[tuple[str, int, bool]]:
    return [(e.stage, e.index, e.cached) for e in events if isinstance(e, Stage)]


async def test_three_images_stream_stages_in_order_then_the_answer(engine: Engine) -> None:
    status = engine.status
    assert status.state is EngineState.IDLE
    images = [png(colour=(255, 0, 0)), png((80, 60), (0, 0, 255)), png((30, 90), (0, 200, 0))]
    events = await collect(engine, ask(images=images))
    assert stages(events) == [
        ("decoding", 1, False),
        ("decoding", 2, False),
        ("decoding", 3, False),
        ("loading_model", 0, False),
        ("encoding", 1, False),
        ("encoding", 2, False),
        ("encoding", 3, False),
        ("answering", 0, False),
    ]
    done = final(events)
    assert isinstance(done, Done)
    tokens = [e for e in events if isinstance(e, Token)]
    assert tokens[-1].count == done.completion_tokens > 0
    assert "".join(t.text for t in tokens) == done.answer
    progress = [e.to_dict()["progress"] for e in events]
    assert progress == sorted(progress) and progress[-1] == 1.0
    assert done.images == 3 and done.cache_hits == 0 and done.prompt_tokens > 0
    assert {"ttft", "prefill", "decode", "encoding", "loading_model", "total"} <= set(done.timings)
    assert 0 < done.timings["patches"] <= done.timings["encoding"]  # part of encoding
    assert status.state is EngineState.READY and status.is_ready


async def test_cached_embeddings_give_token_identical_answers(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    images = [png(colour=(255, 0, 0)), png((80, 60), (0, 0, 255))]
    decoded: list[int] = []
    real = image_checks._decode_rgb
    monkeypatch.setattr(image_checks, "_decode_rgb", lambda *a: decoded.append(1) or real(*a))
    first = await collect(engine, ask(images=images))
    assert len(decoded) == 2
    second = await collect(engine, ask(images=images))
    assert len(decoded) == 2  # cached embeddings: the pixels were not decoded again
    assert [s for s in stages(second) if s[0] == "encoding"] == [
        ("encoding", 1, True),
        ("encoding", 2, True),
    ]
    a, b = final(first), final(second)
    assert isinstance(a, Done) and isinstance(b, Done)
    assert b.cache_hits == 2 and a.answer == b.answer
    assert a.completion_tokens == b.completion_tokens
    engine.cache.memory.clear()
    third = final(await collect(engine, ask(images=images)))
    assert isinstance(third, Done) and third.cache_hits == 0 and third.answer == a.answer


async def test_cache_is_per_tenant(engine: Engine) -> None:
    images = [png()]
    await collect(engine, ask(images=images, tenant="a"))
    other = final(await collect(engine, ask(images=images, tenant="b")))
    assert isinstance(other, Done) and other.cache_hits == 0


async def test_follow_up_keeps_earlier_images_in_the_prompt(engine: Engine) -> None:
    first = final(await collect(engine, ask(images=[png(), png((50, 50))])))
    assert isinstance(first, Done)
    follow = await collect(
        engine, ask("And the second picture?", conversation_id=first.conversation_id)
    )
    done = final(follow)
    assert isinstance(done, Done) and done.conversation_id == first.conversation_id
    # the two earlier images come back from the cache and are part of the prompt
    assert stages(follow)[0:2] == [("encoding", 1, True), ("encoding", 2, True)]
    assert done.prompt_tokens > first.prompt_tokens
    engine.cache.memory.clear()  # earlier images are re-encoded from the stored bytes
    again = await collect(engine, ask("Again?", conversation_id=first.conversation_id))
    assert isinstance(final(again), Done)
    assert ("encoding", 2, False) in stages(again)


async def test_another_tenant_cannot_read_a_conversation(engine: Engine) -> None:
    first = final(await collect(engine, ask(images=[png()], tenant="alice")))
    assert isinstance(first, Done)
    stolen = final(
        await collect(engine, ask("hi", tenant="mallory", conversation_id=first.conversation_id))
    )
    assert isinstance(stolen, Failed) and stolen.code == "conversation_not_found"


BAD_INPUTS = [
    (ask(""), "no_question"),
    (ask("x" * 5000), "question_too_long"),
    (ask(images=[png()] * 9), "too_many_images"),
    (ask(images=[b"%PDF-1.4"]), "image_unsupported"),
    (ask(images=[png(), b""]), "image_empty"),
    (ask(images=[png(), png()[:60]]), "image_unreadable"),
    (ask(images=[b"\0" * (21 * 1024 * 1024)]), "image_too_large"),
    (ask(options=AskOptions(max_new_tokens=0)), "bad_option"),
    (ask(options=AskOptions(max_new_tokens=999_999)), "bad_option"),
    (ask(options=AskOptions(temperature=3.0)), "bad_option"),
    (ask(options=AskOptions(top_p=0.0)), "bad_option"),
    (ask(conversation_id="nope"), "conversation_not_found"),
]


async def test_bad_inputs_give_typed_errors_and_the_engine_keeps_serving(engine: Engine) -> None:
    for request, code in BAD_INPUTS:
        events = await collect(engine, request)
        failed = final(events)
        assert isinstance(failed, Failed), code
        assert failed.code == code
        assert not any(isinstance(e, Token) for e in events)
    zh = final(await collect(engine, ask("", lang="zh")))
    assert isinstance(zh, Failed) and zh.message == "请输入问题。"
    long = final(await collect(engine, ask("x" * 5000)))
    assert isinstance(long, Failed) and "5,000 characters" in long.message
    assert isinstance(final(await collect(engine, ask(images=[png()]))), Done)


async def test_cancelling_mid_answer_frees_the_worker(engine: Engine) -> None:
    request = ask(images=[png()], options=AskOptions(max_new_tokens=400))
    stream = engine.ask(request)
    seen = 0
    async for event in stream:
        if isinstance(event, Token):
            seen += 1
            if seen == 3:
                break
    await stream.aclose()
    # the next request runs (the worker is free again) and answers fully
    nxt = final(await collect(engine, ask(images=[png()])))
    assert isinstance(nxt, Done)
    assert engine.worker.waiting == 0


async def test_cancelled_job_stops_within_a_step(engine: Engine) -> None:
    tokens: list[int] = []
    stream = engine.ask(ask(images=[png()], options=AskOptions(max_new_tokens=400)))
    async for event in stream:
        if isinstance(event, Token):
            tokens.append(event.count)
            break
    await stream.aclose()
    await asyncio.sleep(0)
    follow = await collect(engine, ask(images=[png()], options=AskOptions(max_new_tokens=2)))
    assert isinstance(final(follow), Done)
    assert engine.metrics.requests.labels("cancelled")._value.get() >= 1


async def test_missing_model_fails_typed_and_marks_status(tmp_path: Path) -> None:
    settings = tiny_settings(tmp_path, model_id="nobody/missing")
    status = EngineStatus()
    engine = Engine(settings, ModelStore(tmp_path / "empty"), MemoryState(), status)
    engine.start()
    try:
        failed = final(await collect(engine, ask(images=[png()])))
        assert isinstance(failed, Failed) and failed.code == "model_not_installed"
        assert "qwen-ui" in failed.message  # names the install command
    finally:
        await engine.close()


async def test_broken_checkpoint_fails_and_status_says_why(
    tmp_path: Path, tiny_dirs: dict[str, Path]
) -> None:
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(tiny_dirs["bf16"], broken)
    (broken / "model.safetensors").write_bytes(b"not safetensors")
    store = ModelStore(tmp_path / "store")
    store.install(broken, "test/broken", "bf16")
    status = EngineStatus()
    engine = Engine(tiny_settings(tmp_path, model_id="test/broken"), store, MemoryState(), status)
    engine.start()
    try:
        failed = final(await collect(engine, ask(images=[png()])))
        assert isinstance(failed, Failed) and failed.code == "unsupported_model"
        assert status.state is EngineState.FAILED and status.reason
    finally:
        await engine.close()


async def test_preload_loads_before_any_question(tmp_path: Path, tiny_store: ModelStore) -> None:
    status = EngineStatus()
    engine = Engine(tiny_settings(tmp_path, revision="awq"), tiny_store, MemoryState(), status)
    engine.start()
    try:
        await engine.preload()
        assert status.state is EngineState.READY and engine.pipelines.is_loaded
        events = await collect(engine, ask(images=[png()]))
        assert "loading_model" not in [s[0] for s in stages(events)]
    finally:
        await engine.close()


async def test_admission_seam_is_entered_around_the_work(
    tmp_path: Path, tiny_store: ModelStore
) -> None:
    log: list[str] = []

    class Admission:
        """Plain data in (the model's facts, the request's shape), a reservation out."""

        def __init__(self) -> None:
            self.facts: ModelFacts | None = None

        def use(self, facts: ModelFacts) -> None:
            self.facts = facts

        def loaded(self, resident_bytes: int) -> None:
            log.append("loaded")

        async def fit(self, shape: AskShape) -> Fit:
            assert self.facts is not None and shape.text_tokens > 0
            return Fit(nbytes=len(shape.new_sizes))

        def reserve(self, tenant: str, fit: Fit, report: Callable[[int], None]) -> Any:
            @asynccontextmanager
            async def reserve() -> AsyncIterator[None]:
                report(2)
                await asyncio.sleep(0.01)
                report(1)
                log.append(f"enter {fit.nbytes}")
                try:
                    yield
                finally:
                    log.append("exit")

            return reserve()

    admission = Admission()
    engine = Engine(tiny_settings(tmp_path), tiny_store, MemoryState(), admission=admission)
    engine.start()
    try:
        events = await collect(engine, ask(images=[png()]))
        queued = [e.ahead for e in events if isinstance(e, Stage) and e.stage == "queued"]
        assert queued == [2, 1] and log == ["enter 1", "exit"]
        assert isinstance(final(events), Done)
        log.clear()
        stream = engine.ask(ask(images=[png()], options=AskOptions(max_new_tokens=300)))
        async for event in stream:
            if isinstance(event, Token):
                break
        await stream.aclose()
        assert log == ["enter 1", "exit"]  # released on cancellation too
    finally:
        await engine.close()


async def test_metrics_are_recorded(tmp_path: Path, tiny_store: ModelStore) -> None:
    registry = CollectorRegistry()
    engine = Engine(
        tiny_settings(tmp_path), tiny_store, MemoryState(), metrics=EngineMetrics(registry)
    )
    engine.start()
    try:
        await collect(engine, ask(images=[png(), png((40, 40))]))
        await collect(engine, ask(images=[png()]))
    finally:
        await engine.close()
    value = registry.get_sample_value
    assert value("qwen_ui_engine_time_to_first_token_seconds_count") == 2
    assert value("qwen_ui_engine_embed_cache_lookups_total", {"result": "miss"}) == 2
    assert value("qwen_ui_engine_embed_cache_lookups_total", {"result": "memory"}) == 1
    assert value("qwen_ui_engine_images_per_request_sum") == 3
    assert value("qwen_ui_engine_requests_total", {"outcome": "done"}) == 2
    assert value("qwen_ui_engine_stage_duration_seconds_count", {"stage": "encoding"}) == 2
    assert (value("qwen_ui_engine_decode_tokens_per_second_count") or 0) >= 1


def test_events_serialise_to_json() -> None:
    stage = Stage.at("encoding", 2, 3, cached=True)
    assert stage.to_dict() == {
        "type": "stage",
        "stage": "encoding",
        "index": 2,
        "total": 3,
        "cached": True,
        "ahead": 0,
        "progress": stage.progress,
        "wait_s": 0.0,
        "max_pixels": 0,
        "prompt_tokens": 0,
    }
    assert stage.label("en") == "Encoding image 2/3 (cached)"
    assert stage.label("zh") == "正在编码图片 2/3（缓存）"
    assert Token("猫", 1, 0.5).to_json() == '{"type":"token","text":"猫","count":1,"progress":0.5}'
