"""One contract, two backends: every test runs against memory and a real redis-server."""

from __future__ import annotations

import asyncio

import pytest

from qwen_ui.errors import StateUnavailable
from qwen_ui.state import MemoryState, RedisState, State, open_state
from tests.conftest import free_port


async def test_get_missing_is_none(state: State) -> None:
    assert await state.get("nope") is None


async def test_set_get_roundtrip_bytes(state: State) -> None:
    await state.set("k", b"\x00\xffvalue")
    assert await state.get("k") == b"\x00\xffvalue"


async def test_set_overwrites_and_clears_ttl(state: State) -> None:
    await state.set("k", b"1", ttl=60)
    await state.set("k", b"2")
    assert await state.get("k") == b"2"
    assert await state.ttl("k") is None


async def test_ttl_expires(state: State) -> None:
    await state.set("k", b"v", ttl=0.15)
    assert await state.get("k") == b"v"
    await asyncio.sleep(0.3)
    assert await state.get("k") is None


async def test_delete_reports_existence(state: State) -> None:
    await state.set("k", b"v")
    assert await state.delete("k") is True
    assert await state.delete("k") is False
    assert await state.get("k") is None


async def test_incr_counts_and_sets_ttl_once(state: State) -> None:
    assert await state.incr("c", ttl=60) == 1
    first_ttl = await state.ttl("c")
    assert first_ttl is not None and 55 < first_ttl <= 60
    await state.expire("c", 30)
    assert await state.incr("c", ttl=60) == 2
    later = await state.ttl("c")
    assert later is not None and later <= 30


async def test_incr_without_ttl_never_expires(state: State) -> None:
    await state.incr("c")
    assert await state.ttl("c") is None


async def test_incr_expires_as_a_window(state: State) -> None:
    await state.incr("w", ttl=0.15)
    await state.incr("w", ttl=0.15)
    await asyncio.sleep(0.3)
    assert await state.incr("w", ttl=0.15) == 1


async def test_decr_takes_one_off_and_never_creates(state: State) -> None:
    assert await state.decr("d") == 0
    assert await state.get("d") is None
    await state.incr("d", ttl=60)
    await state.incr("d", ttl=60)
    assert await state.decr("d") == 1
    remaining = await state.ttl("d")
    assert remaining is not None and 55 < remaining <= 60


async def test_expire_missing_is_false(state: State) -> None:
    assert await state.expire("missing", 10) is False


async def test_expire_shortens_life(state: State) -> None:
    await state.set("k", b"v")
    assert await state.expire("k", 0.15) is True
    await asyncio.sleep(0.3)
    assert await state.get("k") is None


async def test_namespaces_do_not_collide(state: State) -> None:
    a, b = state.namespace("a"), state.namespace("b")
    await a.set("k", b"A")
    await b.set("k", b"B")
    assert await a.get("k") == b"A"
    assert await b.get("k") == b"B"
    assert await a.incr("n") == 1
    assert await b.delete("k") is True
    assert await a.get("k") == b"A"


async def test_concurrent_incr_is_atomic(state: State) -> None:
    results = await asyncio.gather(*(state.incr("race", ttl=60) for _ in range(50)))
    assert sorted(results) == list(range(1, 51))


async def test_ping(state: State) -> None:
    await state.ping()


async def test_redis_down_raises_typed_error() -> None:
    backend = RedisState(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.5)
    for call in (backend.ping(), backend.get("k"), backend.set("k", b"v"), backend.incr("k")):
        with pytest.raises(StateUnavailable):
            await call
    await backend.close()


def test_open_state_picks_backend() -> None:
    assert isinstance(open_state(None), MemoryState)
    assert isinstance(open_state("redis://127.0.0.1:1/0"), RedisState)


async def test_memory_sweeps_expired_entries() -> None:
    backend = MemoryState(sweep_every=4)
    for i in range(3):
        await backend.set(f"old{i}", b"v", ttl=0.01)
    await asyncio.sleep(0.05)
    await backend.set("fresh", b"v")
    assert list(backend._data) == ["fresh"]
