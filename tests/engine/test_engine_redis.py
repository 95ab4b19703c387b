"""Two engines (two replicas) sharing Redis: the second reuses the first's embeddings."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from qwen_ui.engine.engine import AskRequest, Engine
from qwen_ui.engine.events import Done, Stage
from qwen_ui.engine.metrics import EngineMetrics
from qwen_ui.state import RedisState
from qwen_ui.store import ModelStore
from tests.engine.conftest import png, tiny_settings

pytestmark = pytest.mark.redis


async def test_second_replica_reuses_embeddings_from_redis(
    tmp_path: Path, tiny_store: ModelStore, redis_server: object
) -> None:
    url = redis_server.url  # type: ignore[attr-defined]
    states = [RedisState(url), RedisState(url)]
    registries = [CollectorRegistry(), CollectorRegistry()]
    engines = [
        Engine(
            tiny_settings(tmp_path / f"r{i}", redis_url=url),
            tiny_store,
            states[i],
            metrics=EngineMetrics(registries[i]),
        )
        for i in range(2)
    ]
    await states[0]._client.flushdb()  # type: ignore[attr-defined]  # no earlier test's keys
    for engine in engines:
        engine.start()
    request = AskRequest(tenant="demo", question="What shape?", images=[png(), png((40, 60))])
    try:
        first = [e async for e in engines[0].ask(request)]
        second = [e async for e in engines[1].ask(request)]
    finally:
        for engine in engines:
            await engine.close()
        for state in states:
            await state.close()
    a, b = first[-1], second[-1]
    assert isinstance(a, Done) and isinstance(b, Done)
    assert a.cache_hits == 0 and b.cache_hits == 2
    assert a.answer == b.answer and a.completion_tokens == b.completion_tokens
    encoding = [e.cached for e in second if isinstance(e, Stage) and e.stage == "encoding"]
    assert encoding == [True, True]
    value = registries[1].get_sample_value
    assert value("qwen_ui_engine_embed_cache_lookups_total", {"result": "redis"}) == 2
