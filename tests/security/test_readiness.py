"""Issue 26, hole 11: /readyz answers 503 with the reason while the Redis server is down
and 200 again once it is back; /healthz keeps answering at once and never waits on it.
A real server, its own redis-server (killed and restarted on the same port)."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from PIL import Image

from tests.support.auth_site import AuthSite, RedisProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.redis]


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisProcess]:
    process = RedisProcess(tmp_path).start()
    yield process
    process.kill()


@pytest.fixture
def site(tmp_path: Path, redis: RedisProcess) -> Iterator[AuthSite]:
    """A server with the OSS world of its own (overrides the suite's shared ``site``)."""
    home = tmp_path / "home"
    home.mkdir()
    site = AuthSite.start(home, {"QWEN_UI_REDIS_URL": redis.url, "QWEN_UI_MAX_NEW_TOKENS": "4"})
    yield site
    site.stop()


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (56, 56), (200, 30, 30)).save(out, "PNG")
    return out.getvalue()


async def answer_once(site: AuthSite) -> None:
    """/readyz also wants the model to have answered once."""
    async with site.api() as api:
        files = [("images", ("red.png", png(), "image/png"))]
        response = await api.post("/api/v1/ask", data={"question": "What shape?"}, files=files)
    assert response.status_code == 200, response.text
    assert '"type": "done"' in response.text or '"type":"done"' in response.text


def poll_ready(site: AuthSite, status: int, within_s: float) -> httpx.Response:
    deadline = time.monotonic() + within_s
    while True:
        response = httpx.get(site.url + "/readyz", timeout=5)
        if response.status_code == status or time.monotonic() > deadline:
            return response
        time.sleep(0.2)


async def test_readyz_follows_redis_and_healthz_never_waits(
    site: AuthSite, redis: RedisProcess
) -> None:
    await answer_once(site)
    assert poll_ready(site, 200, 10).json()["ready"] is True
    redis.kill()
    started = time.monotonic()
    down = httpx.get(site.url + "/readyz", timeout=5)
    assert time.monotonic() - started < 3
    assert down.status_code == 503
    assert down.json()["ready"] is False
    assert down.json()["reasons"] == ["state: redis unreachable"]
    started = time.monotonic()
    assert httpx.get(site.url + "/healthz", timeout=5).status_code == 200
    assert time.monotonic() - started < 1
    redis.start()
    back = poll_ready(site, 200, 15)
    assert back.status_code == 200, back.text
    assert back.json() == {"ready": True, "status": "ready", "engine": "ready"}
