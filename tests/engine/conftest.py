"""Engine fixtures: the tiny random model (plain and AWQ) installed in a temporary store."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import transformers
from PIL import Image

from qwen_ui.engine.engine import Engine
from qwen_ui.engine.pipelines import Loaded, ModelSpec, Pipelines
from qwen_ui.engine.status import EngineStatus
from qwen_ui.settings import Settings
from qwen_ui.state import MemoryState
from qwen_ui.store import ModelStore
from tests.engine.support import build_tiny_model, write_awq_checkpoint

TINY_ID = "test/tiny-vl"


@pytest.fixture(scope="session", autouse=True)
def _quiet_transformers() -> Iterator[None]:
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    yield


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny")
    plain = build_tiny_model(root / "bf16")
    return {"bf16": plain, "awq": write_awq_checkpoint(plain, root / "awq")}


@pytest.fixture(scope="session")
def tiny_store(tmp_path_factory: pytest.TempPathFactory, tiny_dirs: dict[str, Path]) -> ModelStore:
    store = ModelStore(tmp_path_factory.mktemp("store"))
    for revision, path in tiny_dirs.items():
        store.install(path, TINY_ID, revision)
    return store


@pytest.fixture(scope="module", params=["bf16", "awq"])
def loaded(request: pytest.FixtureRequest, tiny_store: ModelStore) -> Loaded:
    """The tiny model through the engine's pipelines on the CPU, each revision (a module may
    define its own ``loaded``)."""
    spec = ModelSpec(TINY_ID, request.param, "cpu", 3136, 112 * 112)
    return Pipelines(tiny_store, spec, EngineStatus()).load()


def scene_images() -> list[Image.Image]:
    """Three small images: a red and a blue rectangle, and noise."""
    return [
        Image.new("RGB", (100, 80), (255, 0, 0)),
        Image.new("RGB", (60, 120), (0, 0, 255)),
        Image.effect_noise((90, 90), 60).convert("RGB"),
    ]


def tiny_settings(home: Path, revision: str = "bf16", **extra: object) -> Settings:
    values: dict[str, object] = {
        "home": home,
        "model_id": TINY_ID,
        "model_revision": revision,
        "device": "cpu",
        "min_pixels": 3136,
        "max_pixels": 112 * 112,
        "max_new_tokens": 16,
    }
    values.update(extra)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture
async def engine(tmp_path: Path, tiny_store: ModelStore) -> AsyncIterator[Engine]:
    eng = Engine(tiny_settings(tmp_path), tiny_store, MemoryState(), EngineStatus())
    eng.start()
    yield eng
    await eng.close()


def png(size: tuple[int, int] = (64, 48), colour: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, "PNG")
    return buf.getvalue()
