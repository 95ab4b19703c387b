"""The app's side of the registry: it builds each model's engine (over the shared
admission line, embedding cache and state) and reads a ref from the store."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any, Protocol

import torch

from qwen_ui.admission.controller import AdmissionController
from qwen_ui.admission.count import CountGate
from qwen_ui.auth.service import AuthService
from qwen_ui.engine.cache import EmbeddingCache
from qwen_ui.engine.engine import Engine
from qwen_ui.engine.facts import placement, weight_copies_at
from qwen_ui.engine.metrics import EngineMetrics
from qwen_ui.engine.remote import RemoteEngine
from qwen_ui.engine.status import EngineStatus
from qwen_ui.engine.warmup import start_up
from qwen_ui.models.admission import ModelAdmission
from qwen_ui.models.memory import WeightLedger, checkpoint_bytes
from qwen_ui.models.refs import ModelRef
from qwen_ui.models.registry import Room
from qwen_ui.models.served import Entry, Served
from qwen_ui.settings import Settings
from qwen_ui.state import State


class Resolving(Protocol):
    def resolve(self, model_id: str, revision: str) -> Any: ...


class EngineHost:
    def __init__(
        self,
        settings: Settings,
        store: Resolving,
        state: State,
        metrics: EngineMetrics,
        line: AdmissionController,
        auth: AuthService,
    ) -> None:
        self.settings = settings
        self.store = store
        self.state = state
        self.metrics = metrics
        self.line = line
        self.auth = auth
        self.where = placement(settings)
        self.ledger: WeightLedger | None = None  # local models: set by the app
        # one cache for every model (its keys hold the snapshot id)
        self.cache = EmbeddingCache(settings.embed_cache_bytes, state, settings.embed_cache_ttl_s)

    def serve(self, entry: Entry, key: int, room: Room) -> Served:
        status = EngineStatus()
        if entry.ref is None:
            gate = CountGate.from_settings(self.settings, self.auth.tenant_limit)
            remote = RemoteEngine(
                self.settings, self.state, status=status, metrics=self.metrics, gate=gate
            )
            remote.start()
            return Served(entry.name, remote, None, key, status)
        assert self.ledger is not None
        ref = entry.ref
        settings = self.settings.model_copy(
            update={"model_id": ref.model_id, "model_revision": ref.revision, "models": ""}
        )
        admission = ModelAdmission(settings, self.line, self.where, self.ledger, key, room)
        engine = Engine(
            settings,
            self.store,
            self.state,
            status=status,
            metrics=self.metrics,
            admission=admission,
        )
        engine.cache = self.cache
        engine.start()
        return Served(entry.name, engine, admission, key, status)

    async def warm(self, engine: Engine | RemoteEngine) -> None:
        """Load the engine's model, and answer the warm-up question where its fast path
        preloads (CUDA by default); a remote engine is probed."""
        if isinstance(engine, Engine) and engine.fast_path.preload:
            await start_up(engine)
        else:
            await engine.preload()

    def snapshot(self, ref: ModelRef) -> tuple[str, int, int]:
        found = self.store.resolve(ref.model_id, ref.revision)
        path = Path(found.path)
        return str(found.id), checkpoint_bytes(path), weight_copies_at(path, self.where)

    def release_memory(self) -> None:
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
