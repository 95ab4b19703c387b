"""Cancellation across two real qwen-ui processes: the first serves the engine tests' tiny
random model (long answers, up to thousands of tokens); the second runs with
``QWEN_UI_ENGINE=openai`` pointed at the first's /v1. A client of the second that hangs
up mid-answer, on ``/api/v1/ask`` or on a streaming ``/v1/chat/completions``, makes the
second close its remote stream: the first counts the request as cancelled on its
/metrics (and audit log), and both keep answering the next request."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from qwen_ui.auth.tokens import add_token, new_token
from tests.engine.conftest import TINY_ID, png
from tests.support.auth import add_tenants, local_tenant
from tests.support.server import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LONG = 2000  # tokens the first may generate: far more than a test waits for
CANCELLED = 'qwen_ui_engine_requests_total{outcome="cancelled"}'


@dataclass
class Pair:
    first: ServerProcess
    second: ServerProcess
    token: str  # an API token of the second's tenant 'demo'
    model: str  # the first's model id, as its /v1/models lists it


def first_server(factory: pytest.TempPathFactory) -> tuple[str, ServerProcess]:
    """The tiny random model served with a long answer allowed; returns its API token."""
    from qwen_ui.store import ModelStore
    from tests.engine.support import build_tiny_model

    home = factory.mktemp("first")
    model = build_tiny_model(factory.mktemp("tiny") / "bf16")
    ModelStore(home / "models").install(model, TINY_ID, "bf16")
    token, record = new_token("remote")
    add_tenants(home / "tenants.toml", add_token(local_tenant("demo"), record))
    env = {
        "QWEN_UI_MODEL_ID": TINY_ID,
        "QWEN_UI_MODEL_REVISION": "bf16",
        "QWEN_UI_DEVICE": "cpu",
        "QWEN_UI_MAX_PIXELS": str(112 * 112),
        "QWEN_UI_MAX_NEW_TOKENS": str(LONG),
        "GRADIO_ANALYTICS_ENABLED": "False",
    }
    process = ServerProcess(home, env=env)
    try:
        process.wait_for("/login", timeout=240)
    except (RuntimeError, TimeoutError):
        process.stop()
        raise
    return token, process


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    first_token, first = first_server(tmp_path_factory)
    headers = {"Authorization": f"Bearer {first_token}"}
    listed = httpx.get(f"{first.url}/v1/models", headers=headers, timeout=30).json()
    model = str(listed["data"][0]["id"])
    home = tmp_path_factory.mktemp("second")
    token, record = new_token("e2e")
    add_tenants(home / "tenants.toml", add_token(local_tenant("demo"), record))
    env = {
        "QWEN_UI_ENGINE": "openai",
        "QWEN_UI_REMOTE_BASE_URL": f"{first.url}/v1",
        "QWEN_UI_REMOTE_MODEL": model,
        "QWEN_UI_REMOTE_API_KEY": first_token,
        "QWEN_UI_REMOTE_TIMEOUT_S": "60",
        "QWEN_UI_MAX_NEW_TOKENS": str(LONG),
        "QWEN_UI_MODEL_ID": "nobody/not-installed",
        "GRADIO_ANALYTICS_ENABLED": "False",
    }
    second = ServerProcess(home, env=env)
    try:
        second.wait_for("/login", timeout=240)
    except (RuntimeError, TimeoutError):
        second.stop()
        first.stop()
        raise
    yield Pair(first, second, token, model)
    second.stop()
    first.stop()


def counter(server: ServerProcess, name: str) -> float:
    for line in httpx.get(f"{server.url}/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def wait_for_count(server: ServerProcess, name: str, at_least: float, within_s: float) -> float:
    deadline = time.monotonic() + within_s
    seen = counter(server, name)
    while seen < at_least and time.monotonic() < deadline:
        time.sleep(0.2)
        seen = counter(server, name)
    return seen


def auth(pair: Pair) -> dict[str, str]:
    return {"Authorization": f"Bearer {pair.token}"}


def hang_up_ask(pair: Pair) -> list[dict[str, Any]]:
    """Ask the second on /api/v1/ask for a long answer; leave after three tokens."""
    seen: list[dict[str, Any]] = []
    data = {"question": "Describe the picture.", "max_new_tokens": str(LONG)}
    files = [("images", ("a.png", png(), "image/png"))]
    url = f"{pair.second.url}/api/v1/ask"
    with httpx.stream(
        "POST", url, data=data, files=files, headers=auth(pair), timeout=120
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            seen.append(json.loads(line))
            if sum(1 for e in seen if e["type"] == "token") >= 3:
                break  # the connection closes mid-answer
    return seen


def hang_up_chat(pair: Pair) -> list[str]:
    """A streaming chat completion of the second; leave after three content chunks."""
    body = {
        "model": pair.model,
        "stream": True,
        "max_tokens": LONG,
        "messages": [{"role": "user", "content": "Tell me a long story."}],
    }
    contents: list[str] = []
    url = f"{pair.second.url}/v1/chat/completions"
    with httpx.stream("POST", url, json=body, headers=auth(pair), timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            for choice in json.loads(line[len("data: ") :])["choices"]:
                if content := (choice.get("delta") or {}).get("content"):
                    contents.append(content)
            if len(contents) >= 3:
                break  # the connection closes mid-answer
    return contents


def answers_next(pair: Pair) -> None:
    body = {
        "model": pair.model,
        "max_tokens": 4,
        "messages": [{"role": "user", "content": "And now?"}],
    }
    reply = httpx.post(
        f"{pair.second.url}/v1/chat/completions", json=body, headers=auth(pair), timeout=120
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"]


def test_hanging_up_on_ask_cancels_on_the_remote(pair: Pair) -> None:
    before, ours = counter(pair.first, CANCELLED), counter(pair.second, CANCELLED)
    started = time.monotonic()
    seen = hang_up_ask(pair)
    assert [e["stage"] for e in seen if e["type"] == "stage"][-1] == "answering"
    assert wait_for_count(pair.first, CANCELLED, before + 1, 30) >= before + 1, (
        "the first never saw the request cancelled"
    )
    assert wait_for_count(pair.second, CANCELLED, ours + 1, 10) >= ours + 1
    assert time.monotonic() - started < 60  # far less than the long answer would take
    answers_next(pair)


def test_hanging_up_on_a_chat_stream_cancels_on_the_remote(pair: Pair) -> None:
    before, ours = counter(pair.first, CANCELLED), counter(pair.second, CANCELLED)
    started = time.monotonic()
    assert len(hang_up_chat(pair)) >= 3
    assert wait_for_count(pair.first, CANCELLED, before + 1, 30) >= before + 1, (
        "the first never saw the request cancelled"
    )
    assert wait_for_count(pair.second, CANCELLED, ours + 1, 10) >= ours + 1
    assert time.monotonic() - started < 60
    answers_next(pair)
    audit = (pair.first.home / "logs" / "audit.jsonl").read_text()
    assert '"outcome":"cancelled"' in audit.replace(" ", "")  # the first's audit says so
    logs = pair.second.output()
    assert pair.token not in logs
