"""The key-value store with TTLs behind sessions, throttles and caches.

Two backends share one interface and one contract test suite: :class:`MemoryState`
(in-process, the embedded default) and :class:`RedisState` (``QWEN_UI_REDIS_URL``, shared
by replicas). Values are bytes; keys are strings, namespaced with :meth:`State.namespace`.
A backend that cannot be reached raises :class:`~qwen_ui.errors.StateUnavailable`.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions

from qwen_ui.errors import StateUnavailable

KEY_PREFIX = "qwen-ui:"


class State(ABC):
    """Bytes values under string keys, each with an optional time to live (seconds)."""

    @abstractmethod
    async def get(self, key: str) -> bytes | None: ...

    @abstractmethod
    async def set(self, key: str, value: bytes, ttl: float | None = None) -> None: ...

    @abstractmethod
    async def delete(self, key: str) -> bool:
        """Remove a key; True when it existed."""

    @abstractmethod
    async def incr(self, key: str, ttl: float | None = None) -> int:
        """Add one; a key created by this call gets ``ttl``, an existing one keeps its own."""

    @abstractmethod
    async def decr(self, key: str) -> int:
        """Take one off an existing counter (its TTL kept); a missing key stays missing (0)."""

    @abstractmethod
    async def expire(self, key: str, ttl: float) -> bool:
        """Set a key's time to live; False when it does not exist."""

    @abstractmethod
    async def ttl(self, key: str) -> float | None:
        """Seconds left, None for a key without expiry or a missing key."""

    @abstractmethod
    async def ping(self) -> None:
        """Raise StateUnavailable when the backend cannot be reached."""

    async def close(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Release connections."""

    @property
    @abstractmethod
    def kind(self) -> str: ...

    def namespace(self, name: str) -> Namespaced:
        return Namespaced(self, name)


@dataclass(frozen=True)
class Namespaced:
    """A view of a :class:`State` whose keys are prefixed by ``name:``."""

    backend: State
    name: str

    def _k(self, key: str) -> str:
        return f"{self.name}:{key}"

    async def get(self, key: str) -> bytes | None:
        return await self.backend.get(self._k(key))

    async def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        await self.backend.set(self._k(key), value, ttl)

    async def delete(self, key: str) -> bool:
        return await self.backend.delete(self._k(key))

    async def incr(self, key: str, ttl: float | None = None) -> int:
        return await self.backend.incr(self._k(key), ttl)

    async def decr(self, key: str) -> int:
        return await self.backend.decr(self._k(key))

    async def expire(self, key: str, ttl: float) -> bool:
        return await self.backend.expire(self._k(key), ttl)

    async def ttl(self, key: str) -> float | None:
        return await self.backend.ttl(self._k(key))


@dataclass
class _Entry:
    value: bytes
    deadline: float | None  # time.monotonic() deadline


@dataclass
class MemoryState(State):
    """In-process backend: a dict with lazy expiry, swept every ``sweep_every`` writes."""

    sweep_every: int = 1024
    _data: dict[str, _Entry] = field(default_factory=dict)
    _writes: int = 0

    @property
    def kind(self) -> str:
        return "memory"

    def _live(self, key: str) -> _Entry | None:
        entry = self._data.get(key)
        if entry is not None and entry.deadline is not None and entry.deadline <= time.monotonic():
            del self._data[key]
            return None
        return entry

    def _write(self, key: str, entry: _Entry) -> None:
        self._data[key] = entry
        self._writes += 1
        if self._writes % self.sweep_every == 0:
            now = time.monotonic()
            for stale in [k for k, e in self._data.items() if e.deadline and e.deadline <= now]:
                del self._data[stale]

    @staticmethod
    def _deadline(ttl: float | None) -> float | None:
        return None if ttl is None else time.monotonic() + ttl

    async def get(self, key: str) -> bytes | None:
        entry = self._live(key)
        return None if entry is None else entry.value

    async def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        self._write(key, _Entry(bytes(value), self._deadline(ttl)))

    async def delete(self, key: str) -> bool:
        return self._live(key) is not None and self._data.pop(key, None) is not None

    async def incr(self, key: str, ttl: float | None = None) -> int:
        entry = self._live(key)
        if entry is None:
            self._write(key, _Entry(b"1", self._deadline(ttl)))
            return 1
        count = int(entry.value) + 1
        entry.value = str(count).encode()
        return count

    async def decr(self, key: str) -> int:
        entry = self._live(key)
        if entry is None:
            return 0
        count = int(entry.value) - 1
        entry.value = str(count).encode()
        return count

    async def expire(self, key: str, ttl: float) -> bool:
        entry = self._live(key)
        if entry is None:
            return False
        entry.deadline = self._deadline(ttl)
        return True

    async def ttl(self, key: str) -> float | None:
        entry = self._live(key)
        if entry is None or entry.deadline is None:
            return None
        return max(0.0, entry.deadline - time.monotonic())

    async def ping(self) -> None:
        return None


_REDIS_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)

_INCR_WITH_TTL = """
local n = redis.call('INCR', KEYS[1])
if n == 1 and tonumber(ARGV[1]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return n
"""

_DECR_EXISTING = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
return redis.call('DECR', KEYS[1])
"""


class RedisState(State):
    """Redis backend; every key carries the ``qwen-ui:`` prefix."""

    def __init__(self, url: str, timeout_s: float = 2.0) -> None:
        self._client = aioredis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )
        self._incr = self._client.register_script(_INCR_WITH_TTL)
        self._decr = self._client.register_script(_DECR_EXISTING)

    @property
    def kind(self) -> str:
        return "redis"

    @staticmethod
    def _ms(ttl: float) -> int:
        return max(1, int(ttl * 1000))

    async def _call(self, coro_fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        try:
            return await coro_fn(*args)
        except _REDIS_DOWN as exc:
            raise StateUnavailable() from exc

    async def get(self, key: str) -> bytes | None:
        value = await self._call(self._client.get, KEY_PREFIX + key)
        return None if value is None else bytes(value)

    async def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        px = None if ttl is None else self._ms(ttl)
        try:
            await self._client.set(KEY_PREFIX + key, value, px=px)
        except _REDIS_DOWN as exc:
            raise StateUnavailable() from exc

    async def delete(self, key: str) -> bool:
        return bool(await self._call(self._client.delete, KEY_PREFIX + key))

    async def incr(self, key: str, ttl: float | None = None) -> int:
        ms = 0 if ttl is None else self._ms(ttl)
        try:
            return int(await self._incr(keys=[KEY_PREFIX + key], args=[ms]))
        except _REDIS_DOWN as exc:
            raise StateUnavailable() from exc

    async def decr(self, key: str) -> int:
        try:
            return int(await self._decr(keys=[KEY_PREFIX + key]))
        except _REDIS_DOWN as exc:
            raise StateUnavailable() from exc

    async def expire(self, key: str, ttl: float) -> bool:
        return bool(await self._call(self._client.pexpire, KEY_PREFIX + key, self._ms(ttl)))

    async def ttl(self, key: str) -> float | None:
        ms = int(await self._call(self._client.pttl, KEY_PREFIX + key))
        return None if ms < 0 else ms / 1000.0

    async def ping(self) -> None:
        await self._call(self._client.ping)

    async def close(self) -> None:
        await self._client.aclose()


def open_state(redis_url: str | None) -> State:
    """The backend the settings ask for; Redis is connected lazily, never at start-up."""
    return RedisState(redis_url) if redis_url else MemoryState()


async def unreachable(state: State, timeout_s: float) -> str | None:
    """Why ``state`` cannot serve now (for /readyz), asked within ``timeout_s``; else None."""
    try:
        await asyncio.wait_for(state.ping(), timeout_s)
    except (StateUnavailable, TimeoutError):
        return f"state: {state.kind} unreachable"
    return None


async def wait_ready(state: State, attempts: int = 1) -> bool:
    """True once ``state`` answers a ping (used by /readyz, never by /healthz)."""
    for attempt in range(attempts):
        try:
            await state.ping()
            return True
        except StateUnavailable:
            if attempt + 1 < attempts:
                await asyncio.sleep(0.1)
    return False
