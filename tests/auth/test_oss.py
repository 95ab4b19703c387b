"""The OSS verifier: allowed key ids, the verification cache (HMAC-keyed, <= 5 min, never
past a stated STS expiry, no STS without one, dropped when OSS rejects the key)."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet

from qwen_ui.auth.clock import Clock
from qwen_ui.auth.errors import InvalidCredentials, OSSUnavailable
from qwen_ui.auth.keys import keys_from_text
from qwen_ui.auth.oss import OSSVerifier, key_id_allowed
from qwen_ui.auth.oss_client import OSSConnector
from qwen_ui.auth.principal import OSSCredentials, Principal
from qwen_ui.state import MemoryState, State
from tests.auth.conftest import ACME, ACME_STS, ACME_UNLISTED, oss_tenant
from tests.conftest import free_port
from tests.support.oss_server import FakeOSS


def verifier(
    state: State, cache_s: float = 300, clock: Clock | None = None, recheck_s: float = 60
) -> OSSVerifier:
    keys = keys_from_text(Fernet.generate_key().decode())
    ns = state.namespace("v")
    return OSSVerifier(
        OSSConnector(timeout_s=2),
        keys,
        ns,
        recheck_s=recheck_s,
        cache_s=cache_s,
        clock=clock or Clock(),
    )


def creds(keys: object) -> OSSCredentials:
    return OSSCredentials(keys.key_id, keys.secret, keys.sts_token)  # type: ignore[attr-defined]


async def test_success_is_cached_under_an_hmac(oss: FakeOSS, state: State) -> None:
    v = verifier(state)
    tenant = oss_tenant("acme", oss.endpoint, "acme/", [])
    assert (await v.verify(tenant, creds(ACME))).principal == Principal("acme", ACME.key_id, "oss")
    assert await v.verify(tenant, creds(ACME))
    assert len(oss.calls(ACME.key_id)) == 1
    with pytest.raises(InvalidCredentials):  # a wrong secret is not served from the cache
        await v.verify(tenant, OSSCredentials(ACME.key_id, "wrong-secret"))
    assert await state.ttl(f"v:{v._cache_key(tenant, creds(ACME))}") <= 300  # type: ignore[operator]


async def test_cache_can_be_off_and_is_capped(oss: FakeOSS) -> None:
    tenant = oss_tenant("acme", oss.endpoint, "acme/", [])
    state = MemoryState()
    off = verifier(state, cache_s=0)
    await off.verify(tenant, creds(ACME))
    await off.verify(tenant, creds(ACME))
    assert len(oss.calls(ACME.key_id)) == 2
    capped = verifier(state, cache_s=10_000)
    await capped.verify(tenant, creds(ACME))
    ttls = [await state.ttl(key) for key in list(state._data)]
    assert ttls and all(ttl is not None and 0 < ttl <= 300 for ttl in ttls)


async def test_allowed_key_ids_checked_before_oss(oss: FakeOSS) -> None:
    tenant = oss_tenant("acme", oss.endpoint, "acme/", [ACME.key_id])
    with pytest.raises(InvalidCredentials):
        await verifier(MemoryState()).verify(tenant, creds(ACME_UNLISTED))
    assert oss.calls() == []


async def test_unreachable_oss(oss: FakeOSS) -> None:
    tenant = oss_tenant("acme", f"http://127.0.0.1:{free_port()}", "acme/", [])
    with pytest.raises(OSSUnavailable) as caught:
        await verifier(MemoryState()).verify(tenant, creds(ACME))
    assert caught.value.status == 503


def test_key_id_patterns() -> None:
    assert key_id_allowed([], "LTAIanything")
    assert key_id_allowed(["STS.*"], "STS.abc")
    assert not key_id_allowed(["STS.*"], "LTAIabc")
    assert not key_id_allowed(["LTAIa"], "LTAIab")


async def test_sts_without_a_stated_expiry_is_never_cached(oss: FakeOSS, state: State) -> None:
    v = verifier(state)
    tenant = oss_tenant("acme", oss.endpoint, "acme/", [])
    await v.verify(tenant, creds(ACME_STS))
    await v.verify(tenant, creds(ACME_STS))
    assert len(oss.calls(ACME_STS.key_id)) == 2
    await v.verify(tenant, creds(ACME_STS), not_after=Clock()() + 3600)
    await v.verify(tenant, creds(ACME_STS))  # an entry exists; without an expiry, unused
    assert len(oss.calls(ACME_STS.key_id)) == 4


async def test_sts_entry_never_outlives_the_stated_expiry(oss: FakeOSS, state: State) -> None:
    clock = Clock()
    v = verifier(state, clock=clock)
    tenant = oss_tenant("acme", oss.endpoint, "acme/", [])
    not_after = clock() + 40
    await v.verify(tenant, creds(ACME_STS), not_after=not_after)
    ttl = await state.ttl(f"v:{v._cache_key(tenant, creds(ACME_STS))}")
    assert ttl is not None and 35 < ttl <= 40
    await v.verify(tenant, creds(ACME_STS), not_after=not_after)
    assert len(oss.calls(ACME_STS.key_id)) == 1
    clock.advance(41)  # the store's TTL has not run out, the stated expiry has
    await v.verify(tenant, creds(ACME_STS))
    assert len(oss.calls(ACME_STS.key_id)) == 2


async def test_an_sts_entry_counts_only_recheck_s_after_oss_confirmed_it(
    oss: FakeOSS, state: State
) -> None:
    """A stated expiry may be later than the real one: the entry counts until OSS's
    confirmation is ``recheck_s`` old, and a cached answer tells when OSS confirmed."""
    clock = Clock()
    v = verifier(state, clock=clock, recheck_s=60)
    tenant = oss_tenant("acme", oss.endpoint, "acme/", [])
    first = await v.verify(tenant, creds(ACME_STS), not_after=clock() + 3600)
    await v.verify(tenant, creds(ACME))
    clock.advance(59)
    cached = await v.verify(tenant, creds(ACME_STS), not_after=clock() + 3600)
    assert cached.at == first.at
    assert len(oss.calls(ACME_STS.key_id)) == 1
    clock.advance(2)  # 61 s after OSS confirmed it
    asked = await v.verify(tenant, creds(ACME_STS), not_after=clock() + 3600)
    assert asked.at >= first.at + 61
    assert len(oss.calls(ACME_STS.key_id)) == 2
    await v.verify(tenant, creds(ACME))  # a permanent key: the cache's full time
    assert len(oss.calls(ACME.key_id)) == 1


async def test_a_rejection_for_any_session_drops_the_entry(oss: FakeOSS, state: State) -> None:
    clock = Clock()
    v = verifier(state, clock=clock)
    tenant = oss_tenant("acme", oss.endpoint, "acme/", [])
    await v.verify(tenant, creds(ACME_STS), not_after=clock() + 3600)
    oss.keys[ACME_STS.key_id].expires_at = oss.now() - 1  # OSS now says SecurityTokenExpired
    clock.advance(1)
    with pytest.raises(InvalidCredentials):  # another session's re-check
        await v.verify(tenant, creds(ACME_STS), use_cache=False)
    clock.advance(1)
    with pytest.raises(InvalidCredentials):  # the next login is not served from the cache
        await v.verify(tenant, creds(ACME_STS), not_after=clock() + 3600)
    assert len(oss.calls(ACME_STS.key_id)) == 3


async def test_the_cache_key_covers_the_sts_token(oss: FakeOSS, state: State) -> None:
    v = verifier(state)
    tenant = oss_tenant("acme", oss.endpoint, "acme/", [])
    await v.verify(tenant, creds(ACME_STS), not_after=Clock()() + 3600)
    forged = OSSCredentials(ACME_STS.key_id, ACME_STS.secret, "sts-token-forged")
    with pytest.raises(InvalidCredentials):
        await v.verify(tenant, forged, not_after=Clock()() + 3600)
    assert len(oss.calls(ACME_STS.key_id)) == 2
