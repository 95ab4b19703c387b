"""The session store on both backends: hashed ids, encrypted secrets, expiry by the clock."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet

from qwen_ui.auth.clock import Clock
from qwen_ui.auth.keys import keys_from_text
from qwen_ui.auth.principal import OSSCredentials, Principal
from qwen_ui.auth.sessions import SessionStore, credential_mark, session_key
from qwen_ui.auth.tenants import OSSConfig, Tenant
from qwen_ui.state import MemoryState, State
from tests.auth.conftest import SecretWatch

SECRET = "session-test-secret-value-xyz"
TOKEN = "session-test-sts-token-" + "Z" * 40


def store(state: State, clock: Clock, key: bytes | None = None) -> SessionStore:
    keys = keys_from_text((key or Fernet.generate_key()).decode())
    return SessionStore(state.namespace("sessions"), keys, clock, idle_s=600, lifetime_s=3600)


async def test_create_load_delete(state: State) -> None:
    sessions = store(state, Clock())
    session_id, _ = await sessions.create(Principal("acme", "LTAIx", "oss"))
    loaded = await sessions.load(session_id)
    assert loaded is not None and loaded.principal == Principal("acme", "LTAIx", "oss")
    assert await sessions.delete(session_id)
    assert await sessions.load(session_id) is None


async def test_stored_under_a_hash_with_the_secret_encrypted(secret_watch: SecretWatch) -> None:
    secret_watch.add(SECRET, TOKEN)
    state = MemoryState()
    sessions = store(state, Clock())
    creds = OSSCredentials("LTAIx", SECRET, TOKEN)
    session_id, session = await sessions.create(Principal("acme", "LTAIx", "oss"), creds)
    secret_watch.add(session_id)
    keys = list(state._data)
    assert keys == [f"sessions:{session_key(session_id)}"]
    raw = state._data[keys[0]].value
    for plain in (session_id, SECRET, TOKEN):
        assert plain.encode() not in raw
    assert sessions.credentials(session) == creds


async def test_another_server_key_cannot_open_the_secret(state: State) -> None:
    clock = Clock()
    sessions = store(state, clock)
    session_id, _ = await sessions.create(Principal("a", "k", "oss"), OSSCredentials("k", SECRET))
    other = store(state, clock)
    loaded = await other.load(session_id)
    assert loaded is not None and other.credentials(loaded) is None


async def test_rotated_key_still_opens_old_sessions(state: State) -> None:
    old, new = Fernet.generate_key(), Fernet.generate_key()
    clock = Clock()
    before = store(state, clock, old)
    session_id, _ = await before.create(Principal("a", "k", "oss"), OSSCredentials("k", SECRET))
    after = SessionStore(
        state.namespace("sessions"),
        keys_from_text(f"{new.decode()},{old.decode()}"),
        clock,
        600,
        3600,
    )
    loaded = await after.load(session_id)
    assert loaded is not None and after.credentials(loaded) == OSSCredentials("k", SECRET)


async def test_idle_expiry_and_touch(state: State) -> None:
    clock = Clock()
    sessions = store(state, clock)
    session_id, _ = await sessions.create(Principal("t", "u"))
    clock.advance(500)
    assert await sessions.load(session_id) is not None  # restarts the idle clock
    clock.advance(500)
    assert await sessions.load(session_id) is not None
    clock.advance(601)
    assert await sessions.load(session_id) is None
    assert await state.get(f"sessions:{session_key(session_id)}") is None  # deleted


async def test_absolute_expiry_and_not_after(state: State) -> None:
    clock = Clock()
    sessions = store(state, clock)
    session_id, _ = await sessions.create(Principal("t", "u"))
    short_id, short = await sessions.create(Principal("t", "u"), not_after=clock() + 100)
    assert short.expires == pytest.approx(clock() + 100)
    for _ in range(6):
        clock.advance(590)
        assert await sessions.load(session_id) is not None
    assert await sessions.load(short_id) is None
    clock.advance(590)
    assert await sessions.load(session_id) is None


@pytest.mark.parametrize("bad", [None, "", "x", "a" * 43 + "!", "../" * 15])
async def test_malformed_ids_are_not_looked_up(bad: str | None) -> None:
    sessions = store(MemoryState(), Clock())
    assert await sessions.load(bad) is None


def test_the_credential_mark_follows_the_tenants_file() -> None:
    """A new password hash, a removed user, another kind or OSS settings: another mark
    (or none); the mark never contains the stored hash."""
    keys = keys_from_text(Fernet.generate_key().decode())
    user = Principal("school", "alice", "password")
    local = Tenant(id="school", kind="local", users={"alice": "scrypt$a", "bob": "scrypt$b"})
    mark = credential_mark(keys, local, user)
    assert mark is not None and "scrypt" not in mark
    assert credential_mark(keys, local, user) == mark
    changed = local.model_copy(update={"users": {"alice": "scrypt$new", "bob": "scrypt$b"}})
    assert credential_mark(keys, changed, user) not in (mark, None)
    removed = local.model_copy(update={"users": {"bob": "scrypt$b"}})
    assert credential_mark(keys, removed, user) is None
    oss = OSSConfig(region="cn-test", endpoint="https://o.example", bucket="bkt", prefix="a/")
    acme = Tenant(id="school", kind="oss", oss=oss)
    assert credential_mark(keys, acme, user) is None
    key = Principal("school", "LTAIx", "oss")
    moved = acme.model_copy(update={"oss": oss.model_copy(update={"prefix": "b/"})})
    assert credential_mark(keys, acme, key) not in (credential_mark(keys, moved, key), None)
    assert credential_mark(keys, local, key) is None
