"""Admission fixtures: the engine's tiny random model in a store, an engine wired to the
admission seam, and image helpers."""

from __future__ import annotations

import io
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from qwen_ui.admission.seam import EngineAdmission, build
from qwen_ui.admission.sizing import Sized
from qwen_ui.engine.engine import AskOptions, AskRequest, Engine
from qwen_ui.engine.events import Event
from qwen_ui.engine.facts import placement
from qwen_ui.engine.shapes import Size
from qwen_ui.state import MemoryState
from qwen_ui.store import ModelStore
from tests.engine.conftest import TINY_ID, tiny_settings
from tests.engine.support import build_tiny_model, write_awq_checkpoint

__all__ = ["TINY_ID", "ask", "collect", "noise", "tiny_settings"]


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-admission") / "bf16")


@pytest.fixture(scope="session")
def tiny_store(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> ModelStore:
    """The tiny model as ``bf16`` and as ``awq`` (int4, fused projections when served)."""
    store = ModelStore(tmp_path_factory.mktemp("store-admission"))
    store.install(tiny_model, TINY_ID, "bf16")
    awq = write_awq_checkpoint(tiny_model, tmp_path_factory.mktemp("tiny-admission-awq") / "awq")
    store.install(awq, TINY_ID, "awq")
    return store


class Wired:
    def __init__(self, engine: Engine, admission: EngineAdmission) -> None:
        self.engine = engine
        self.admission = admission
        self.controller = admission.controller

    async def size(self, request: AskRequest, sizes: list[Size]) -> Sized:
        """``request`` sized as the engine would hand it over with images of ``sizes``."""
        return self.admission.size(await self.engine.shape(request, sizes))


async def start(home: Path, store: ModelStore, **settings: Any) -> Wired:
    values: dict[str, Any] = {"max_pixels": 448 * 448, "max_new_tokens": 8}
    values.update(settings)
    config = tiny_settings(home, **values)
    admission = build(config, placement(config), tenant_limit=lambda t: 4)
    engine = Engine(config, store, MemoryState(), admission=admission)
    engine.start()
    return Wired(engine, admission)


@pytest.fixture
async def wired(tmp_path: Path, tiny_store: ModelStore) -> AsyncIterator[Wired]:
    w = await start(tmp_path, tiny_store)
    yield w
    await w.engine.close()


def noise(size: tuple[int, int], seed: int = 0) -> bytes:
    """A PNG with random content (distinct images never share a cache entry)."""
    from PIL import Image

    rng = random.Random(seed)
    image = Image.frombytes("RGB", size, rng.randbytes(size[0] * size[1] * 3))
    buf = io.BytesIO()
    image.save(buf, "PNG")
    return buf.getvalue()


def ask(
    images: list[bytes] | None = None,
    question: str = "What is in the picture?",
    tenant: str = "acme",
    max_new_tokens: int | None = None,
    conversation_id: str | None = None,
) -> AskRequest:
    return AskRequest(
        tenant=tenant,
        question=question,
        images=images or [],
        conversation_id=conversation_id,
        options=AskOptions(max_new_tokens=max_new_tokens),
    )


async def collect(engine: Engine, request: AskRequest) -> list[Event]:
    return [event async for event in engine.ask(request)]
