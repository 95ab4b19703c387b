"""DeferredApp: /healthz answers while the real app is built; failures are reported."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from qwen_ui.boot import DeferredApp
from qwen_ui.settings import Settings


class Lifespan:
    """Drives an ASGI app's lifespan protocol by hand."""

    def __init__(self, app: DeferredApp) -> None:
        self.app, self.inbox, self.outbox = app, asyncio.Queue[Any](), asyncio.Queue[Any]()

    async def start(self) -> None:
        self.task = asyncio.create_task(
            self.app({"type": "lifespan"}, self.inbox.get, self.outbox.put)
        )
        await self.inbox.put({"type": "lifespan.startup"})
        assert (await self.outbox.get())["type"] == "lifespan.startup.complete"

    async def stop(self) -> None:
        await self.inbox.put({"type": "lifespan.shutdown"})
        assert (await self.outbox.get())["type"] == "lifespan.shutdown.complete"
        await self.task


def client(app: DeferredApp) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


async def test_healthz_while_building_then_forwarding(tmp_path: Path) -> None:
    release = threading.Event()
    real = FastAPI()
    real.add_api_route("/healthz", lambda: {"real": True})
    real.add_api_route("/other", lambda: {"other": True})

    def build() -> FastAPI:
        release.wait(10)
        return real

    app = DeferredApp(Settings(home=tmp_path), build)
    life = Lifespan(app)
    await life.start()
    async with client(app) as http:
        early = await http.get("/healthz")
        assert early.status_code == 200 and early.json()["engine"] == "idle"
        busy = await http.get("/other")
        assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
        release.set()
        for _ in range(200):
            if (await http.get("/other")).status_code == 200:
                break
            await asyncio.sleep(0.01)
        assert (await http.get("/healthz")).json() == {"real": True}
    await life.stop()


async def test_build_failure_turns_healthz_503(tmp_path: Path) -> None:
    def build() -> FastAPI:
        raise RuntimeError("theme folder missing")

    app = DeferredApp(Settings(home=tmp_path), build)
    life = Lifespan(app)
    await life.start()
    async with client(app) as http:
        for _ in range(200):
            response = await http.get("/healthz")
            if response.status_code == 503:
                break
            await asyncio.sleep(0.01)
        assert response.status_code == 503
        assert response.json()["engine"] == "failed"
        assert "theme folder missing" in response.json()["reason"]
    await life.stop()
