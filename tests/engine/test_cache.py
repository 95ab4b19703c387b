from __future__ import annotations

import pytest
import torch

from qwen_ui.engine.cache import CacheKey, Embedding, EmbeddingCache, MemoryLRU
from qwen_ui.state import MemoryState, RedisState, State


def emb(rows: int, fill: float = 1.0) -> Embedding:
    return Embedding(torch.full((rows, 16), fill), (1, 2, rows // 2 * 2 or 2))


def key(tenant: str = "t", sha: str = "abc", snapshot: str = "s1") -> CacheKey:
    return CacheKey(tenant, sha, "min=1,max=2", snapshot)


def test_lru_is_bounded_in_bytes_and_evicts_least_recent() -> None:
    one = emb(4).nbytes  # 4 × 16 float32 = 256 bytes
    lru = MemoryLRU(max_bytes=3 * one)
    for name in "abc":
        lru.put(name, emb(4))
    assert lru.get("a") is not None  # a is now the most recent
    lru.put("d", emb(4))
    assert lru.get("b") is None and lru.get("a") is not None
    assert lru.nbytes == 3 * one and len(lru) == 3
    lru.put("huge", emb(400))  # larger than the whole budget: not kept
    assert lru.get("huge") is None and lru.nbytes <= lru.max_bytes


def test_keys_differ_by_every_part() -> None:
    base = key()
    variants = [
        key(tenant="u"),
        key(sha="abd"),
        key(snapshot="s2"),
        CacheKey("t", "abc", "min=1,max=3", "s1"),
    ]
    assert len({base.digest, *(v.digest for v in variants)}) == 5


def test_embedding_bytes_are_safetensors_not_pickle() -> None:
    original = Embedding(torch.randn(6, 16).to(torch.bfloat16), (1, 4, 6))
    data = original.to_bytes()
    header_len = int.from_bytes(data[:8], "little")
    assert data[8:9] == b"{" and b"features" in data[8 : 8 + header_len]
    restored = Embedding.from_bytes(data)
    assert restored.grid_thw == (1, 4, 6)
    assert torch.equal(restored.features, original.features)


async def test_memory_state_has_no_remote_tier() -> None:
    cache = EmbeddingCache(1 << 20, MemoryState(), ttl_s=60)
    assert not cache.has_remote
    assert await cache.fetch(key()) == (None, "miss")
    cache.put_memory(key(), emb(4))
    found, tier = await cache.fetch(key())
    assert found is not None and tier == "memory"


@pytest.mark.redis
async def test_redis_tier_serves_other_processes(redis_server: object) -> None:
    url = redis_server.url  # type: ignore[attr-defined]
    state: State = RedisState(url)
    try:
        writer = EmbeddingCache(1 << 20, state, ttl_s=60)
        reader = EmbeddingCache(1 << 20, state, ttl_s=60)  # another replica: cold memory
        assert writer.has_remote
        await writer.put_remote(key(), emb(4, 2.5))
        found, tier = await reader.fetch(key())
        assert tier == "redis" and found is not None
        assert torch.equal(found.features, emb(4, 2.5).features)
        assert (await reader.fetch(key()))[1] == "memory"  # promoted
        ttl = await state.namespace("embed").ttl(key().digest)
        assert ttl is not None and 0 < ttl <= 60
        assert (await reader.fetch(key(tenant="other")))[1] == "miss"
    finally:
        await state.close()


async def test_unreachable_redis_degrades_to_a_miss() -> None:
    state = RedisState("redis://127.0.0.1:1/0", timeout_s=0.2)
    try:
        cache = EmbeddingCache(1 << 20, state, ttl_s=60)
        assert await cache.fetch(key()) == (None, "miss")
        await cache.put_remote(key(), emb(4))  # logged, not raised
    finally:
        await state.close()
