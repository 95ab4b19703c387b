"""The static-KV-cache decode path gives the reference (dynamic cache) path's tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image

from qwen_ui.engine.engine import AskRequest, Engine
from qwen_ui.engine.events import Token
from qwen_ui.engine.generate import (
    CachePool,
    DecodeMode,
    Generation,
    SamplingOptions,
    cache_bytes,
    cache_length,
    run,
)
from qwen_ui.engine.pipelines import Loaded, Turn
from qwen_ui.engine.status import EngineStatus
from qwen_ui.state import MemoryState
from qwen_ui.store import ModelStore
from tests.engine.conftest import png, scene_images, tiny_settings


def decode(
    loaded: Loaded,
    turns: list[Turn],
    images: list[Image.Image],
    mode: DecodeMode,
    pool: CachePool | None = None,
) -> list[int]:
    prompt = loaded.language.build_prompt(turns, [loaded.vision.encode(i) for i in images])
    tokens: list[int] = []
    generation = Generation(loaded.language.model, prompt, SamplingOptions(24), mode, pool)
    run(generation, [], tokens.append, lambda: False)  # no stop ids: always 24 tokens
    return tokens


CASES = [
    ([Turn("What shape is in the picture?", 1)], 1),
    ([Turn("What shapes are in the pictures?", 3)], 3),
    ([Turn("How many squares are there?", 2, "three"), Turn("Which picture?", 1)], 3),
]


@pytest.mark.parametrize(("turns", "count"), CASES, ids=["1-image", "3-images", "history"])
def test_static_decode_matches_the_reference(loaded: Loaded, turns: list[Turn], count: int) -> None:
    images = scene_images()[:count]
    reference = decode(loaded, turns, images, "eager")
    assert len(reference) == 24
    assert decode(loaded, turns, images, "static") == reference


def test_pooled_caches_are_reused_and_reset(loaded: Loaded) -> None:
    pool = CachePool(loaded.language.model)
    a_turns, b_turns, images = CASES[0][0], CASES[1][0], scene_images()
    a = decode(loaded, a_turns, images[:1], "eager")
    b = decode(loaded, b_turns, images, "eager")
    assert decode(loaded, a_turns, images[:1], "static", pool) == a
    assert decode(loaded, b_turns, images, "static", pool) == b  # same bucket, reset cache
    assert decode(loaded, a_turns, images[:1], "static", pool) == a


def test_the_pool_keeps_idle_caches_within_its_bytes(loaded: Loaded) -> None:
    model = loaded.language.model
    sizes = {}
    for length in (256, 512, 768):  # caches allocate on first use: fill one position
        cache = CachePool(model).take(length)
        decode_one(model, cache)
        sizes[length] = cache_bytes(cache)
    assert sizes[512] == 2 * sizes[256] > 0
    pool = CachePool(model, max_bytes=sizes[256] + sizes[512])
    kept = {}
    for length in (256, 512, 768):
        kept[length] = pool.take(length)
        decode_one(model, kept[length])
        pool.give_back(length, kept[length])
        assert pool.idle_bytes <= pool.max_bytes  # type: ignore[operator]
    assert pool.take(768) is kept[768]  # the most recent stays ...
    assert pool.take(256) is not kept[256]  # ... the oldest went to make room
    nothing = CachePool(model, max_bytes=0)
    nothing.give_back(256, kept[256])
    assert nothing.idle_bytes == 0


def decode_one(model: Any, cache: Any) -> None:
    with torch.inference_mode():
        ids = torch.tensor([[1]])
        model(input_ids=ids, position_ids=torch.zeros((3, 1, 1), dtype=torch.long), cache=cache)


def test_cache_lengths_come_in_buckets() -> None:
    assert cache_length(1) == 256
    assert cache_length(256) == 256
    assert cache_length(257) == 512


async def test_engine_answers_alike_in_both_decode_modes(
    tmp_path: Path, tiny_store: ModelStore
) -> None:
    """The single-request loop (``max_batch=1``, where the decode mode applies) in both
    modes, and the continuous batch, answer alike."""
    answers: list[list[Token]] = []
    for mode, batch in (("eager", 1), ("static", 1), ("eager", 8)):
        settings = tiny_settings(
            tmp_path / f"{mode}{batch}", decode_mode=mode, max_new_tokens=12, max_batch=batch
        )
        engine = Engine(settings, tiny_store, MemoryState(), EngineStatus())
        engine.start()
        try:
            request = AskRequest("demo", "Describe the picture.", [png()])
            answers.append(
                [e for e in [e async for e in engine.ask(request)] if isinstance(e, Token)]
            )
        finally:
            await engine.close()
    texts = [[t.text for t in tokens] for tokens in answers]
    assert texts[0] == texts[1] == texts[2] and len(texts[0]) > 0
