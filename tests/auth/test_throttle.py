"""Login throttling on both backends, judged on an injected clock."""

from __future__ import annotations

import asyncio

import pytest
from cryptography.fernet import Fernet

from qwen_ui.auth.clock import Clock
from qwen_ui.auth.errors import LoginThrottled
from qwen_ui.auth.keys import keys_from_text
from qwen_ui.auth.throttle import LoginThrottle, Reservation, ThrottlePolicy
from qwen_ui.state import MemoryState, State

POLICY = ThrottlePolicy(
    max_failures=3, max_failures_per_ip=10, backoff_s=10, backoff_max_s=60, window_s=3600
)


def throttle(state: State, clock: Clock) -> LoginThrottle:
    keys = keys_from_text(Fernet.generate_key().decode())
    return LoginThrottle(state.namespace("t"), keys, clock, POLICY)


async def fail(t: LoginThrottle, ip: str, who: str, times: int = 1) -> None:
    for _ in range(times):
        await t.failed(await t.reserve(ip, who))


async def test_engages_and_releases(state: State) -> None:
    clock = Clock()
    t = throttle(state, clock)
    await fail(t, "1.1.1.1", "acme/alice", 2)
    await t.check("1.1.1.1", "acme/alice")
    await fail(t, "1.1.1.1", "acme/alice", 1)
    with pytest.raises(LoginThrottled) as caught:
        await t.check("1.1.1.1", "acme/alice")
    assert caught.value.retry_after == pytest.approx(10, abs=0.5)
    assert caught.value.status == 429
    clock.advance(10.5)
    await t.check("1.1.1.1", "acme/alice")


async def test_back_off_doubles_up_to_the_cap(state: State) -> None:
    clock = Clock()
    t = throttle(state, clock)
    waits = []
    for _ in range(6):
        await fail(t, "1.1.1.1", "acme/alice")
        try:
            await t.check("1.1.1.1", "acme/alice")
        except LoginThrottled as exc:
            assert exc.retry_after is not None
            waits.append(round(exc.retry_after))
            clock.advance(exc.retry_after + 0.1)
    assert waits == [10, 20, 40, 60]


async def test_other_address_and_other_user_unaffected(state: State) -> None:
    clock = Clock()
    t = throttle(state, clock)
    await fail(t, "6.6.6.6", "acme/alice", POLICY.max_failures)
    with pytest.raises(LoginThrottled):
        await t.check("6.6.6.6", "acme/alice")
    await t.check("7.7.7.7", "acme/alice")
    await t.check("6.6.6.6", "acme/bob")


async def test_per_address_limit(state: State) -> None:
    t = throttle(state, Clock())
    for n in range(POLICY.max_failures_per_ip):
        await fail(t, "6.6.6.6", f"acme/user{n}")
    with pytest.raises(LoginThrottled):
        await t.check("6.6.6.6", "acme/someone-new")
    await t.check("7.7.7.7", "acme/someone-new")


async def test_success_clears_the_user_counter(state: State) -> None:
    t = throttle(state, Clock())
    await fail(t, "1.1.1.1", "acme/alice", 2)
    await t.succeeded(await t.reserve("1.1.1.1", "acme/alice"))
    await fail(t, "1.1.1.1", "acme/alice", 2)
    await t.check("1.1.1.1", "acme/alice")


async def test_user_names_are_not_stored_in_clear() -> None:
    memory = MemoryState()
    t = throttle(memory, Clock())
    await fail(t, "1.1.1.1", "acme/alice", 3)
    assert not any("alice" in key for key in memory._data)


async def outcomes(t: LoginThrottle, ip: str, whos: list[str]) -> list[Reservation | None]:
    """Reserve for every ``who`` at once; None where the attempt was throttled."""

    async def one(who: str) -> Reservation | None:
        try:
            return await t.reserve(ip, who)
        except LoginThrottled as exc:
            assert exc.retry_after is not None and exc.retry_after > 0
            return None

    return list(await asyncio.gather(*(one(who) for who in whos)))


async def test_parallel_guesses_for_one_user_get_at_most_the_limit(state: State) -> None:
    t = throttle(state, Clock())
    granted = [r for r in await outcomes(t, "1.1.1.1", ["acme/alice"] * 40) if r]
    assert len(granted) == POLICY.max_failures
    await asyncio.gather(*(t.failed(r) for r in granted))
    with pytest.raises(LoginThrottled):
        await t.reserve("1.1.1.1", "acme/alice")


async def test_parallel_guesses_from_one_address_get_at_most_its_limit(state: State) -> None:
    t = throttle(state, Clock())
    whos = [f"acme/user{n}" for n in range(40)]
    granted = [r for r in await outcomes(t, "6.6.6.6", whos) if r]
    assert len(granted) == POLICY.max_failures_per_ip


async def test_after_a_lock_runs_out_one_parallel_guess_passes(state: State) -> None:
    clock = Clock()
    t = throttle(state, clock)
    await fail(t, "1.1.1.1", "acme/alice", POLICY.max_failures)
    clock.advance(POLICY.backoff_s + 0.5)
    granted = [r for r in await outcomes(t, "1.1.1.1", ["acme/alice"] * 20) if r]
    assert len(granted) == 1
    await t.failed(granted[0])
    with pytest.raises(LoginThrottled) as caught:
        await t.reserve("1.1.1.1", "acme/alice")
    assert caught.value.retry_after == pytest.approx(2 * POLICY.backoff_s, abs=0.5)


async def test_released_and_successful_slots_are_given_back(state: State) -> None:
    t = throttle(state, Clock())
    for _ in range(POLICY.max_failures_per_ip * 2):
        await t.release(await t.reserve("1.1.1.1", "acme/alice"))
        await t.succeeded(await t.reserve("1.1.1.1", "acme/bob"))
    await fail(t, "1.1.1.1", "acme/alice", POLICY.max_failures - 1)
    await t.reserve("1.1.1.1", "acme/alice")
