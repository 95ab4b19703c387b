"""Login throttling on both backends, judged on an injected clock."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet

from qwen_ui.auth.clock import Clock
from qwen_ui.auth.errors import LoginThrottled
from qwen_ui.auth.keys import keys_from_text
from qwen_ui.auth.throttle import LoginThrottle, ThrottlePolicy
from qwen_ui.state import MemoryState, State

POLICY = ThrottlePolicy(
    max_failures=3, max_failures_per_ip=10, backoff_s=10, backoff_max_s=60, window_s=3600
)


def throttle(state: State, clock: Clock) -> LoginThrottle:
    keys = keys_from_text(Fernet.generate_key().decode())
    return LoginThrottle(state.namespace("t"), keys, clock, POLICY)


async def fail(t: LoginThrottle, ip: str, who: str, times: int) -> None:
    for _ in range(times):
        await t.failed(ip, who)


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
        await t.failed("1.1.1.1", "acme/alice")
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
    await fail(t, "6.6.6.6", "acme/alice", 5)
    with pytest.raises(LoginThrottled):
        await t.check("6.6.6.6", "acme/alice")
    await t.check("7.7.7.7", "acme/alice")
    await t.check("6.6.6.6", "acme/bob")


async def test_per_address_limit(state: State) -> None:
    t = throttle(state, Clock())
    for n in range(POLICY.max_failures_per_ip):
        await t.failed("6.6.6.6", f"acme/user{n}")
    with pytest.raises(LoginThrottled):
        await t.check("6.6.6.6", "acme/someone-new")
    await t.check("7.7.7.7", "acme/someone-new")


async def test_success_clears_the_user_counter(state: State) -> None:
    t = throttle(state, Clock())
    await fail(t, "1.1.1.1", "acme/alice", 2)
    await t.succeeded("1.1.1.1", "acme/alice")
    await fail(t, "1.1.1.1", "acme/alice", 2)
    await t.check("1.1.1.1", "acme/alice")


async def test_user_names_are_not_stored_in_clear() -> None:
    memory = MemoryState()
    t = throttle(memory, Clock())
    await fail(t, "1.1.1.1", "acme/alice", 3)
    assert not any("alice" in key for key in memory._data)
