"""The admission seam inside the engine (tiny random model on the CPU): queue events,
never-fits refusals, downscaling, exact prompt sizes, release on every exit path."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from qwen_ui.admission import seam
from qwen_ui.admission.errors import ImagesNeverFit
from qwen_ui.engine.events import Done, Failed, Stage, Token
from qwen_ui.engine.images import decode_all
from qwen_ui.store import ModelStore
from tests.admission.conftest import Wired, ask, collect, noise, start


def stages(events: list[object], name: str) -> list[Stage]:
    return [e for e in events if isinstance(e, Stage) and e.stage == name]


async def test_prompt_size_is_exact_for_new_and_follow_up_turns(wired: Wired) -> None:
    first = ask([noise((300, 200), 1), noise((64, 480), 2)], "Compare these two pictures.")
    sized = await wired.size(first, [(300, 200), (64, 480)])
    checked = decode_all(list(first.images), wired.engine.limits)
    shape = await wired.engine.shape(first, [c.size for c in checked])
    assert (await wired.admission.fit(shape)).nbytes == sized.estimate.total
    done = (await collect(wired.engine, first))[-1]
    assert isinstance(done, Done) and done.prompt_tokens == sized.shape.prompt_tokens
    follow = ask([noise((500, 500), 3)], "And this one?", conversation_id=done.conversation_id)
    sized_follow = await wired.size(follow, [(500, 500)])
    done_follow = (await collect(wired.engine, follow))[-1]
    assert isinstance(done_follow, Done)
    assert done_follow.prompt_tokens == sized_follow.shape.prompt_tokens
    assert sized_follow.shape.image_tokens > sized.shape.image_tokens  # history counted
    assert wired.controller.in_use == 0


async def test_a_follow_up_reads_its_conversation_once_and_is_sized_once(
    wired: Wired, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine computes the request's shape once and hands it over; admission reads
    nothing of the engine. Before, a follow-up read the conversation three times (engine,
    admission's fit, admission's reserve) and was sized twice."""
    first = ask([noise((300, 200), 31), noise((64, 96), 32)], "Compare these two pictures.")
    done = (await collect(wired.engine, first))[-1]
    assert isinstance(done, Done)
    calls: dict[str, int] = {"get": 0, "image": 0, "size": 0}

    def counted(name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return real(*args, **kwargs)

        return call

    conversations = wired.engine.conversations
    monkeypatch.setattr(conversations, "get", counted("get", conversations.get))
    monkeypatch.setattr(conversations, "image", counted("image", conversations.image))
    monkeypatch.setattr(seam, "size_request", counted("size", seam.size_request))
    follow = ask([noise((100, 100), 33)], "And this one?", conversation_id=done.conversation_id)
    done_follow = (await collect(wired.engine, follow))[-1]
    assert isinstance(done_follow, Done) and done_follow.conversation_id == done.conversation_id
    assert calls == {"get": 1, "image": 2, "size": 1}  # two earlier images, each read once
    assert wired.controller.in_use == 0


async def test_second_request_waits_in_line_with_an_estimated_wait(wired: Wired) -> None:
    request = ask([noise((448, 448), 4)], max_new_tokens=30)
    sized = await wired.size(request, [(448, 448)])
    wired.controller.set_budget(sized.estimate.total + 1)  # one at a time
    results = await asyncio.gather(
        collect(wired.engine, request), collect(wired.engine, ask([noise((448, 448), 5)]))
    )
    assert all(isinstance(r[-1], Done) for r in results)
    queued = [s for r in results for s in stages(r, "queued")]
    assert len(queued) == 1 and queued[0].ahead == 0 and queued[0].wait_s > 0
    assert "Waiting in line: position 1, about" in queued[0].label("en")
    assert wired.controller.in_use == 0 and wired.controller.max_in_use <= sized.estimate.total


async def test_a_request_that_never_fits_is_refused_with_what_to_do(wired: Wired) -> None:
    await wired.engine.served_model()  # the model's facts set the budget first
    wired.controller.set_budget(1024 * 1024)
    events = await collect(wired.engine, ask([noise((448, 448), 6)] * 3))
    failed = events[-1]
    assert isinstance(failed, Failed) and failed.code == ImagesNeverFit.code
    assert failed.status == 413 and "fewer or smaller images" in failed.message
    assert "3 attached" in failed.message and not stages(events, "queued")
    text_only = (await collect(wired.engine, ask([], max_new_tokens=2000)))[-1]
    assert isinstance(text_only, Failed) and text_only.code == ImagesNeverFit.code
    assert "max_new_tokens" in text_only.message
    assert wired.controller.in_use == 0 and wired.controller.waiting == 0


async def test_images_are_downscaled_to_fit_when_allowed(
    tmp_path: Path, tiny_store: ModelStore
) -> None:
    w = await start(tmp_path, tiny_store, downscale_to_fit=True)
    try:
        sizes = [(448, 448), (448, 336)]
        request = ask([noise(sizes[0], 7), noise(sizes[1], 8)])
        full = await w.size(request, sizes)
        w.controller.set_budget(full.estimate.total - 1)
        events = await collect(w.engine, request)
        done = events[-1]
        assert isinstance(done, Done), events[-1]
        notice = stages(events, "downscaled")
        assert len(notice) == 1 and 3136 <= notice[0].max_pixels < 448 * 448
        assert "reduced" in notice[0].label("en") and "缩小" in notice[0].label("zh")
        assert done.prompt_tokens < full.shape.prompt_tokens
        assert w.controller.max_in_use <= w.controller.budget
        assert w.controller.metrics.downscaled._value.get() == 1
    finally:
        await w.engine.close()


async def test_released_when_the_client_goes_away_mid_answer(wired: Wired) -> None:
    stream = wired.engine.ask(ask([noise((200, 200), 9)], max_new_tokens=200))
    async for event in stream:
        if isinstance(event, Token):
            assert wired.controller.in_use > 0
            break
    await stream.aclose()
    assert wired.controller.in_use == 0 and wired.controller.inflight("acme") == 0


async def test_released_when_the_client_goes_away_while_queued(wired: Wired) -> None:
    request = ask([noise((448, 448), 10)], max_new_tokens=40)
    sized = await wired.size(request, [(448, 448)])
    wired.controller.set_budget(sized.estimate.total + 1)
    first = asyncio.create_task(collect(wired.engine, request))
    await asyncio.sleep(0.05)
    stream = wired.engine.ask(ask([noise((448, 448), 11)]))
    async for event in stream:
        if isinstance(event, Stage) and event.stage == "queued":
            break
    await stream.aclose()
    assert wired.controller.waiting == 0
    assert isinstance((await first)[-1], Done)
    assert wired.controller.in_use == 0


async def test_released_after_a_busy_timeout(tmp_path: Path, tiny_store: ModelStore) -> None:
    w = await start(tmp_path, tiny_store, queue_timeout_s=0.2)
    try:
        request = ask([noise((448, 448), 12)], max_new_tokens=8)
        sized = await w.size(request, [(448, 448)])
        w.controller.set_budget(sized.estimate.total + 1)
        async with w.controller.reserve("other", sized.estimate.total):  # the GPU is busy
            events = await collect(w.engine, request)
        failed = events[-1]
        assert isinstance(failed, Failed) and failed.code == "busy_wait_timeout"
        assert failed.status == 503 and "retry in" in failed.message
        assert w.controller.in_use == 0 and w.controller.waiting == 0
    finally:
        await w.engine.close()
