"""Load over loopback: 32 concurrent clients of 2 tenants through ``POST /api/v1/ask`` of a
real uvicorn server (in this process, so the controller's own accounting can be read),
the tiny random model on the CPU, a budget small enough that requests wait for memory.

Every request must end with an answer, a typed busy error, or (for the clients that hang
up on purpose) a disconnect; none may be lost. The controller must never reserve more
than its budget, no tenant may hold more requests than its limit, and everything must be
released at the end. Bounded: 64 requests, 120 s at most.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from qwen_ui.auth.principal import Principal
from qwen_ui.auth.tenants import Limits, Tenant
from qwen_ui.engine.engine import AskRequest
from qwen_ui.server import create_app
from qwen_ui.services import services_of
from qwen_ui.store import ModelStore
from qwen_ui.web.auth import SESSION_COOKIE, cookie_name
from tests.admission.conftest import TINY_ID, noise, tiny_settings
from tests.conftest import free_port
from tests.support import auth as auth_support

LIMITS = {"alpha": 2, "beta": 3}
CLIENTS = 32
PER_CLIENT = 2
HANG_UPS = 4  # the first clients hang up after the first line of their first stream
BUSY = {"busy_queue_full", "busy_wait_timeout"}


@pytest.fixture
async def served(tmp_path: Path, tiny_model: Path) -> AsyncIterator[tuple[FastAPI, str]]:
    settings = tiny_settings(
        tmp_path / "home",
        max_pixels=448 * 448,
        max_images=3,
        max_new_tokens=6,
        queue_max=16,
        queue_timeout_s=3.0,
    )
    ModelStore(settings.model_path).install(tiny_model, TINY_ID, "bf16")
    tenants = [
        Tenant(
            id=tid,
            kind="local",
            users={"user": auth_support.test_password_hash()},
            limits=Limits(concurrent_requests=limit),  # type: ignore[call-arg]
        )
        for tid, limit in LIMITS.items()
    ]
    auth_support.add_tenants(settings.tenants_path, *tenants)
    app = create_app(settings)
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    async with asyncio.timeout(30):
        while not server.started:
            await asyncio.sleep(0.02)
    try:
        yield app, f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        async with asyncio.timeout(30):
            await task


async def session_client(app: FastAPI, url: str, tenant: str) -> httpx.AsyncClient:
    session_id = await auth_support.open_session(app, Principal(tenant, "user"))
    # a browser's same-origin request: cookie-authenticated posts must name their origin
    client = httpx.AsyncClient(base_url=url, timeout=60, headers={"origin": url})
    client.cookies.set(cookie_name(SESSION_COOKIE, False), session_id)
    return client


async def one_request(
    client: httpx.AsyncClient, images: list[bytes], hang_up: bool, seen: list[float]
) -> str:
    """POST a question; the outcome: "done", a busy error code, or "disconnected"."""
    files = [("images", (f"{i}.png", data, "image/png")) for i, data in enumerate(images)]
    data = {"question": "What shapes are in these pictures?"}
    async with client.stream("POST", "/api/v1/ask", data=data, files=files or None) as response:
        if response.status_code != 200:
            error = json.loads(await response.aread())["error"]
            check_busy(error, response.headers.get("retry-after"))
            return str(error["code"])
        async for line in response.aiter_lines():
            if not line:
                continue
            event = json.loads(line)
            if event["type"] == "stage" and event["stage"] == "queued":
                seen.append(event["wait_s"])
            if hang_up:
                return "disconnected"  # leaving the block closes the connection
            if event["type"] == "failed":
                check_busy(event, None)
                return str(event["code"])
            if event["type"] == "done":
                return "done"
    return "lost"


def check_busy(error: dict[str, Any], header: str | None) -> None:
    assert error["code"] in BUSY, error
    assert error["status"] == 503 and error["retry_after"] >= 1
    assert "retry in" in error["message"]
    assert header is None or int(header) >= 1


async def test_32_clients_of_2_tenants(served: tuple[FastAPI, str]) -> None:
    app, url = served
    rng = random.Random(3)
    pictures = [
        noise((rng.choice([96, 224, 448]), rng.choice([96, 224, 448])), i) for i in range(24)
    ]
    warm = await session_client(app, url, "alpha")
    assert await one_request(warm, [pictures[0]], False, []) == "done"  # loads the model
    await warm.aclose()
    controller = services_of(app).admission.controller
    question = AskRequest(tenant="alpha", question="What shapes are in these pictures?")
    services = services_of(app)
    shapes = [await services.engine.shape(question, [(448, 448)] * n) for n in (1, 3)]
    sized = [services.admission.size(shape) for shape in shapes]
    controller.set_budget(int(2.5 * sized[1].estimate.total))  # two or three at a time
    seen: list[float] = []

    async def client(index: int) -> list[str]:
        tenant = ("alpha", "beta")[index % 2]
        http = await session_client(app, url, tenant)
        outcomes = []
        try:
            for _ in range(PER_CLIENT):
                images = rng.sample(pictures, rng.randint(0, 3))
                hang_up = index < HANG_UPS and "disconnected" not in outcomes
                outcomes.append(await one_request(http, images, hang_up, seen))
        finally:
            await http.aclose()
        return outcomes

    async with asyncio.timeout(120):
        results = await asyncio.gather(*(client(i) for i in range(CLIENTS)))
        while controller.in_use or controller.waiting:  # disconnects finish cancelling
            await asyncio.sleep(0.05)
    outcomes = Counter(o for r in results for o in r)
    assert sum(outcomes.values()) == CLIENTS * PER_CLIENT and "lost" not in outcomes
    assert set(outcomes) <= {"done", "disconnected", *BUSY}, outcomes
    assert outcomes["done"] >= CLIENTS // 2 and outcomes["disconnected"] >= 1, outcomes
    assert seen and all(w >= 0 for w in seen)  # requests really waited in line
    snapshot = controller.snapshot()
    assert snapshot.max_in_use <= controller.budget  # the controller's own accounting
    assert snapshot.max_in_use > sized[1].estimate.total  # and more than one ran at once
    for tenant, limit in LIMITS.items():
        assert 1 <= controller.max_inflight[tenant] <= limit
    assert snapshot.in_use == 0 and snapshot.waiting == 0 and not snapshot.inflight
    async with httpx.AsyncClient(base_url=url) as plain:
        metrics = (await plain.get("/metrics")).text
    assert "qwen_ui_admission_in_use_bytes 0.0" in metrics
    assert "qwen_ui_admission_wait_seconds_count" in metrics
