"""The image-embedding cache: an in-process LRU bounded in bytes, plus a Redis tier.

Key: tenant + image sha256 + processor settings + model snapshot id, so a tenant never
sees another tenant's entries and a new model or new pixel bounds never reuse stale ones.
Entries live on the CPU (they do not take accelerator memory); the Redis tier holds them
as safetensors bytes (never pickle) for ``embed_cache_ttl_s`` seconds.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from qwen_ui.errors import StateUnavailable
from qwen_ui.state import RedisState, State

log = logging.getLogger(__name__)

NAMESPACE = "embed"


@dataclass(frozen=True)
class CacheKey:
    tenant: str
    sha256: str
    processor: str  # e.g. "min=3136,max=1003520"
    snapshot: str

    @property
    def digest(self) -> str:
        raw = "\x1f".join((self.tenant, self.sha256, self.processor, self.snapshot))
        return hashlib.sha256(raw.encode()).hexdigest()


@dataclass(frozen=True)
class Embedding:
    """One image's vision-tower output and the grid it was computed on."""

    features: torch.Tensor  # [tokens, hidden], on the CPU
    grid_thw: tuple[int, int, int]
    deepstack: torch.Tensor | None = None  # Qwen3-VL: [layers, tokens, hidden]

    @property
    def nbytes(self) -> int:
        extra = 0 if self.deepstack is None else self.deepstack.numel()
        return (self.features.numel() + extra) * self.features.element_size()

    def to_bytes(self) -> bytes:
        tensors = {
            "features": self.features.contiguous(),
            "grid_thw": torch.tensor(self.grid_thw, dtype=torch.int64),
        }
        if self.deepstack is not None:
            tensors["deepstack"] = self.deepstack.contiguous()
        return st_save(tensors)

    @classmethod
    def from_bytes(cls, data: bytes) -> Embedding:
        tensors = st_load(data)
        t, h, w = (int(v) for v in tensors["grid_thw"].tolist())
        return cls(tensors["features"], (t, h, w), tensors.get("deepstack"))


class MemoryLRU:
    """Thread-safe LRU bounded by the total bytes of its tensors."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, Embedding] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str) -> Embedding | None:
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
            return item

    def put(self, key: str, item: Embedding) -> None:
        if item.nbytes > self.max_bytes:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._items[key] = item
            self._bytes += item.nbytes
            while self._bytes > self.max_bytes:
                _, evicted = self._items.popitem(last=False)
                self._bytes -= evicted.nbytes

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0


class EmbeddingCache:
    """Memory first, then Redis (when the app's state is Redis)."""

    def __init__(self, max_bytes: int, state: State | None, ttl_s: int) -> None:
        self.memory = MemoryLRU(max_bytes)
        self._remote = state.namespace(NAMESPACE) if isinstance(state, RedisState) else None
        self._ttl = ttl_s

    @property
    def has_remote(self) -> bool:
        return self._remote is not None and self._ttl > 0

    async def fetch(self, key: CacheKey) -> tuple[Embedding | None, str]:
        """The entry and the tier it came from ("memory", "redis" or "miss")."""
        item = self.memory.get(key.digest)
        if item is not None:
            return item, "memory"
        if not self.has_remote:
            return None, "miss"
        assert self._remote is not None
        try:
            data = await self._remote.get(key.digest)
        except StateUnavailable:
            log.warning("embedding cache: redis unavailable, computing instead")
            return None, "miss"
        if data is None:
            return None, "miss"
        item = Embedding.from_bytes(data)
        self.memory.put(key.digest, item)
        return item, "redis"

    def put_memory(self, key: CacheKey, item: Embedding) -> None:
        self.memory.put(key.digest, item)

    async def put_remote(self, key: CacheKey, item: Embedding) -> None:
        if not self.has_remote:
            return
        assert self._remote is not None
        try:
            await self._remote.set(key.digest, item.to_bytes(), ttl=self._ttl)
        except StateUnavailable:
            log.warning("embedding cache: redis unavailable, entry kept in memory only")
