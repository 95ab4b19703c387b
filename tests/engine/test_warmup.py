"""Start-up with ``preload``: load, answer the warm-up question once, then ready; /healthz
answers throughout and /readyz only turns ready after the warm-up."""

from __future__ import annotations

import io
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from qwen_ui.engine import warmup
from qwen_ui.engine.engine import Engine
from qwen_ui.engine.events import Done, Failed
from qwen_ui.engine.status import EngineState, EngineStatus
from qwen_ui.engine.warmup import (
    WARM_UP_SIZE,
    start_up,
    warm_up_image,
    warm_up_request,
    warm_up_rounds,
)
from qwen_ui.server import create_app
from qwen_ui.services import services_of
from qwen_ui.state import MemoryState
from qwen_ui.store import ModelStore
from tests.engine.conftest import tiny_settings


@dataclass
class RecordingStatus(EngineStatus):
    moves: list[EngineState] = field(default_factory=list)

    def _move(self, state: EngineState, reason: str | None = None) -> None:
        self.moves.append(state)
        super()._move(state, reason)


def test_warm_up_question_is_a_drawn_1024x768_picture() -> None:
    with Image.open(io.BytesIO(warm_up_image())) as image:
        assert image.size == WARM_UP_SIZE and image.mode == "RGB"
        assert len(image.getcolors() or []) >= 4  # ground and three shapes
    request = warm_up_request(max_new_tokens=7)
    assert request.history == () and request.options.max_new_tokens == 7
    assert request.options.temperature == 0.0 and len(request.images) == 1


def test_each_warm_up_question_has_a_picture_of_its_own() -> None:
    pictures = {warm_up_image(variant=v) for v in range(64)}
    assert len(pictures) == 64  # a round's questions are encoded, not cache hits
    sizes = {Image.open(io.BytesIO(p)).size for p in pictures}
    assert sizes == {WARM_UP_SIZE}  # the same prompt length: one compiled cache length


async def test_start_up_loads_warms_up_then_is_ready(
    tmp_path: Path, tiny_store: ModelStore
) -> None:
    status = RecordingStatus()
    engine = Engine(tiny_settings(tmp_path, preload=True), tiny_store, MemoryState(), status)
    engine.start()
    try:
        assert engine.fast_path.preload
        questions = sum(warm_up_rounds(warmup.batch_limit(engine)))
        last = await start_up(engine)
        assert isinstance(last, Done) and last.images == 1 and last.completion_tokens >= 1
        assert last.cache_hits == 0  # its picture went through the tower with its round's
        assert status.moves == [
            EngineState.LOADING,
            EngineState.READY,  # loaded; not ready for /readyz: nothing answered yet
            EngineState.WARMING,
            EngineState.READY,
        ]
        assert status.is_ready and status.answered == questions
        assert last.conversation_id == ""  # stateless: no conversation kept
    finally:
        await engine.close()


async def test_failed_warm_up_leaves_readiness_to_the_first_answer(
    tmp_path: Path, tiny_store: ModelStore
) -> None:
    # the warm-up picture (786,432 px) is over this server's pixel limit: a typed refusal
    settings = tiny_settings(tmp_path, preload=True, max_image_pixels=100_000)
    status = EngineStatus()
    engine = Engine(settings, tiny_store, MemoryState(), status)
    engine.start()
    try:
        last = await start_up(engine)
        assert isinstance(last, Failed)
        assert status.state is EngineState.READY and status.answered == 0
        assert not status.is_ready
    finally:
        await engine.close()


def test_cpu_default_loads_lazily(tmp_path: Path, tiny_store: ModelStore) -> None:
    app = create_app(tiny_settings(tmp_path), ui=False, store=tiny_store)
    with TestClient(app) as client:
        time.sleep(0.2)
        assert services_of(app).status.state is EngineState.IDLE
        assert client.get("/readyz").status_code == 503


def test_healthz_answers_while_warming_and_readyz_waits(
    tmp_path: Path, tiny_store: ModelStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    calls: list[str] = []
    work = Engine._work

    def held_work(self: Engine, job: Any, plan: Any) -> Any:
        calls.append("work")
        assert gate.wait(60)
        return work(self, job, plan)

    monkeypatch.setattr(Engine, "_work", held_work)
    # one request at a time: its work is Engine._work, held here
    settings = tiny_settings(tmp_path, preload=True, max_batch=1)
    app = create_app(settings, ui=False, store=tiny_store)
    with TestClient(app) as client:
        status = services_of(app).status
        deadline = time.monotonic() + 60
        while status.state is not EngineState.WARMING and time.monotonic() < deadline:
            time.sleep(0.05)
        assert status.state is EngineState.WARMING
        t0 = time.perf_counter()
        health = client.get("/healthz")
        assert time.perf_counter() - t0 < 1.0  # never waits on the warm-up
        assert health.status_code == 200 and health.json()["engine"] == "warming"
        ready = client.get("/readyz")
        assert ready.status_code == 503 and "warming" in ready.json()["reason"]
        gate.set()
        while not status.is_ready and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.get("/readyz").status_code == 200
        assert len(calls) == 1 and status.answered == 1  # the warm-up ran once


def test_warm_up_rounds_cover_every_batch_bucket() -> None:
    assert warm_up_rounds(1) == [1]
    assert warm_up_rounds(8) == [1, 2, 4, 8]
    assert warm_up_rounds(12) == [1, 2, 4, 8, 12]
    assert warm_up_rounds(64) == [1, 2, 4, 8, 16, 32, 64]


async def test_a_batching_worker_is_warmed_up_per_bucket(
    tmp_path: Path, tiny_store: ModelStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(warmup, "batch_limit", lambda _engine: 4)
    status = EngineStatus()
    engine = Engine(tiny_settings(tmp_path, preload=True), tiny_store, MemoryState(), status)
    engine.start()
    try:
        last = await start_up(engine)
        assert isinstance(last, Done)
        assert status.answered == 1 + 2 + 4 and status.is_ready
    finally:
        await engine.close()
