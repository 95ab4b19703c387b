"""A switch under load on a real ``qwen-ui serve`` process (CPU, the shipped demo model):
32 concurrent API clients keep asking while ``qwen-ui models activate`` replaces the bf16
revision with the awq one, under a weights budget that holds only one of them (the new
one loads after the old one drains). No request may fail; each is answered by the model
it was routed to (the ``X-Qwen-UI-Model`` header names it before the first line, the
``done`` event after the last); what finished before the switch came from bf16, what
started after it from awq. Then ``SIGHUP`` re-reads the settings file. The admin token
appears in no log line (the server logs at debug)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from qwen_ui.auth.tenants import Limits
from qwen_ui.demo.install import weights_dir
from qwen_ui.models.memory import checkpoint_bytes
from qwen_ui.settings import DEMO_MODEL_ID
from tests.models.test_two_demo_models import scene_png
from tests.support import auth as auth_support
from tests.support.server import ServerProcess, log_in_with_form

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BF16, AWQ = f"{DEMO_MODEL_ID}@bf16", f"{DEMO_MODEL_ID}@awq"
TOKEN = "switch-admin-token-2b81f0"
CLIENTS = 32
BEFORE = 32  # answers before the switch (the load is on when it comes)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("home")
    tenant = auth_support.local_tenant("load", ("user",)).model_copy(
        update={"limits": Limits(concurrent_requests=CLIENTS)}  # type: ignore[call-arg]
    )
    auth_support.add_tenants(home / "tenants.toml", tenant)
    largest = max(checkpoint_bytes(weights_dir(r)) for r in ("bf16", "awq"))
    settings_file = home / "qwen-ui.env"
    settings_file.write_text(f"QWEN_UI_MODELS={BF16}\n")
    env = {
        "QWEN_UI_DEVICE": "cpu",
        "QWEN_UI_MODELS": BF16,
        "QWEN_UI_MODEL_MEMORY_BYTES": str(largest + largest // 2),  # one revision at a time
        "QWEN_UI_ADMIN_TOKEN": TOKEN,
        "QWEN_UI_SETTINGS_FILE": str(settings_file),
        "QWEN_UI_MAX_NEW_TOKENS": "6",
        "QWEN_UI_QUEUE_TIMEOUT_S": "600",
        "QWEN_UI_LOG_LEVEL": "debug",
        "GRADIO_ANALYTICS_ENABLED": "False",
    }
    process = ServerProcess(home, env=env)
    process.wait_for("/login")
    yield process
    process.stop()


@dataclass
class Outcome:
    routed: str  # the header
    answered: str  # the done event's model ("" when the request failed)
    started: float
    ended: float
    failure: str = ""


async def ask(client: httpx.AsyncClient, image: bytes) -> Outcome:
    started = time.monotonic()
    files = [("images", ("scene.png", image, "image/png"))]
    data = {"question": "How many shapes are there?", "lang": "en"}
    async with client.stream("POST", "/api/v1/ask", data=data, files=files) as response:
        routed = response.headers.get("x-qwen-ui-model", "")
        if response.status_code != 200:
            body = (await response.aread()).decode()[:300]
            return Outcome(routed, "", started, time.monotonic(), body)
        last: dict[str, object] = {}
        async for line in response.aiter_lines():
            if line:
                last = json.loads(line)
    answered = str(last.get("model", "")) if last.get("type") == "done" else ""
    failure = "" if answered else json.dumps(last)[:300]
    return Outcome(routed, answered, started, time.monotonic(), failure)


def activate(server: ServerProcess, model: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "QWEN_UI_ADMIN_TOKEN": TOKEN, "QWEN_UI_HOME": str(server.home)}
    return subprocess.run(
        [sys.executable, "-m", "qwen_ui.cli", "models", "activate", model, "--url", server.url],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def load_with_a_switch(
    server: ServerProcess, cookies: httpx.Cookies
) -> tuple[list[Outcome], list[float]]:
    image = scene_png()
    outcomes: list[Outcome] = []
    switched = asyncio.Event()
    switch_window: list[float] = []

    async def client() -> None:
        headers = {"origin": server.url}
        async with httpx.AsyncClient(
            base_url=server.url, cookies=cookies, headers=headers, timeout=600
        ) as http:
            after = 0
            while after < 1:  # at least one question that starts after the switch
                if switched.is_set():
                    after += 1
                outcomes.append(await ask(http, image))

    async def switch() -> None:
        while sum(1 for o in outcomes if o.answered) < BEFORE:
            await asyncio.sleep(0.05)
        switch_window.append(time.monotonic())
        done = await asyncio.to_thread(activate, server, AWQ)
        switch_window.append(time.monotonic())
        assert done.returncode == 0, done.stderr
        assert f"default: {AWQ}" in done.stdout and BF16 in done.stdout, done.stdout
        switched.set()

    async with asyncio.timeout(900):
        await asyncio.gather(switch(), *(client() for _ in range(CLIENTS)))
    return outcomes, switch_window


def test_switch_under_32_clients_fails_no_request(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=120) as session:
        log_in_with_form(session, "load", "user", auth_support.TEST_PASSWORD)
        cookies = session.cookies
    outcomes, (switch_start, switch_end) = asyncio.run(load_with_a_switch(server, cookies))
    failures = [o for o in outcomes if o.failure]
    assert not failures, failures[:3]
    assert all(o.routed == o.answered for o in outcomes)  # finished where it started
    before = [o for o in outcomes if o.ended < switch_start]
    after = [o for o in outcomes if o.started > switch_end]
    assert len(before) >= BEFORE and {o.answered for o in before} == {BF16}
    assert len(after) >= CLIENTS and {o.answered for o in after} == {AWQ}
    health = httpx.get(server.url + "/healthz").json()
    assert health["revision"] == "awq"
    assert health["models"] == [{"model": AWQ, "state": "ready", "default": True, "in_flight": 0}]
    log = server.output()
    assert "model qwen-ui/shapes-vl-demo@bf16 unloaded" in log
    assert TOKEN not in log


def test_sighup_rereads_the_settings_file(server: ServerProcess) -> None:
    (server.home / "qwen-ui.env").write_text(f"QWEN_UI_MODELS={BF16},{AWQ}\n")
    server.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        models = [m["model"] for m in httpx.get(server.url + "/healthz").json()["models"]]
        if models == [BF16, AWQ]:
            break
        time.sleep(0.1)
    assert models == [BF16, AWQ], server.output()[-2000:]
    assert server.proc.poll() is None  # still serving
    assert TOKEN not in server.output()
