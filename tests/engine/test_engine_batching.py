"""Continuous batching through ``Engine.ask``: requests asked together are answered
together (one decode step for all), each with the tokens it gets alone (``max_batch=1``,
the single-request loop); one client leaving cancels only its own sequence."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from qwen_ui.engine.batching import Batch
from qwen_ui.engine.engine import AskOptions, AskRequest, Engine
from qwen_ui.engine.events import Done, Event, Token
from qwen_ui.engine.status import EngineStatus
from qwen_ui.state import MemoryState
from qwen_ui.store import ModelStore
from tests.engine.conftest import png, tiny_settings

REQUESTS = [
    ("What shape is in the picture?", [png(colour=(255, 0, 0))], 12),
    ("How many squares are there?", [png((80, 60), (0, 0, 255)), png((30, 90))], 16),
    ("Describe the image.", [png((50, 50), (0, 200, 0))], 9),
    ("Which picture shows more shapes?", [png((90, 40), (9, 9, 9))], 14),
]


def requests() -> list[AskRequest]:
    return [
        AskRequest("demo", q, images, options=AskOptions(max_new_tokens=n))
        for q, images, n in REQUESTS
    ]


@asynccontextmanager
async def started(home: Path, store: ModelStore, **settings: Any) -> AsyncIterator[Engine]:
    engine = Engine(tiny_settings(home, **settings), store, MemoryState(), EngineStatus())
    engine.start()
    try:
        yield engine
    finally:
        await engine.close()


async def answer(engine: Engine, request: AskRequest) -> Done:
    events: list[Event] = [e async for e in engine.ask(request)]
    assert isinstance(events[-1], Done), events[-1]
    return events[-1]


async def alone(home: Path, store: ModelStore) -> list[Done]:
    async with started(home, store, max_batch=1) as engine:
        assert engine.batch is None
        return [await answer(engine, r) for r in requests()]


def batch_sizes(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of sequences in each decode step the engine's batch runs."""
    sizes: list[int] = []
    assert engine.batch is not None
    real = Batch._launch

    def launch(batch: Batch[Any], chain: Any = None) -> Any:
        sizes.append(len(batch.running))
        return real(batch, chain)

    monkeypatch.setattr(engine.batch, "_launch", lambda chain=None: launch(engine.batch, chain))
    return sizes


async def test_requests_asked_together_decode_together_as_they_would_alone(
    tmp_path: Path, tiny_store: ModelStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = await alone(tmp_path / "alone", tiny_store)
    async with started(tmp_path / "batch", tiny_store, max_batch=4) as engine:
        await answer(engine, requests()[2])  # the model loads; the embedding cache stays cold
        sizes = batch_sizes(engine, monkeypatch)
        dones = await asyncio.gather(*(answer(engine, r) for r in requests()))
    assert max(sizes) == 4  # all four shared decode steps
    for done, want in zip(dones, expected, strict=True):
        assert done.answer == want.answer and done.completion_tokens == want.completion_tokens
        assert done.finish_reason == want.finish_reason
        assert {"ttft", "prefill", "decode", "encoding"} <= set(done.timings)
        if done.cache_hits < done.images:  # encoded here: making the patches was timed too
            assert 0 < done.timings["patches"] <= done.timings["encoding"]


async def test_questions_asked_together_join_the_batch_in_one_group(
    tmp_path: Path, tiny_store: ModelStore
) -> None:
    # a wait far longer than the four take to be checked and planned: a join of four
    async with started(tmp_path, tiny_store, max_batch=4, batch_join_wait_ms=1000) as engine:
        await answer(engine, requests()[2])  # the model loads
        assert engine.batch is not None
        joins: list[int] = []
        prepare = engine.batch.prepare

        def counted(entrants: list[Any]) -> list[Any]:
            joins.append(len(entrants))
            return prepare(entrants)

        engine.batch.prepare = counted
        await asyncio.gather(*(answer(engine, r) for r in requests()))
        assert joins == [4]
        assert engine.arrivals.coming == 0
        await answer(engine, requests()[0])  # alone: nobody on the way, no wait
        assert joins == [4, 1]


async def test_a_client_leaving_cancels_only_its_own_sequence(
    tmp_path: Path, tiny_store: ModelStore
) -> None:
    expected = await alone(tmp_path / "alone", tiny_store)
    async with started(tmp_path / "batch", tiny_store, max_batch=4) as engine:
        await answer(engine, requests()[0])
        leaving = AskRequest(
            "demo", "Describe the image.", [png()], options=AskOptions(max_new_tokens=200)
        )

        async def leave_after_two_tokens() -> int:
            tokens = 0
            stream = engine.ask(leaving)
            async for event in stream:
                tokens += isinstance(event, Token)
                if tokens == 2:
                    break
            await stream.aclose()
            return tokens

        left, *dones = await asyncio.gather(
            leave_after_two_tokens(), *(answer(engine, r) for r in requests())
        )
        assert left == 2
        for _ in range(100):  # the batch drops the cancelled sequence within a step
            if engine.batch is not None and not engine.batch.busy:
                break
            await asyncio.sleep(0.05)
        assert engine.batch is not None and not engine.batch.busy
    for done, want in zip(dones, expected, strict=True):
        assert done.answer == want.answer
