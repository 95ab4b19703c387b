"""Shared fixtures: settings under a temporary home, the in-process app, real Redis."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from qwen_ui.server import create_app
from qwen_ui.settings import Settings
from qwen_ui.state import MemoryState, RedisState, State
from tests.support.auth import log_in

ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def settings(home: Path) -> Settings:
    return Settings(home=home)


@pytest.fixture
def app(settings: Settings) -> FastAPI:
    return create_app(settings)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    """Logged in as demo/demo (a local tenant); see ``anonymous_client`` for none."""
    with TestClient(app) as test_client:
        log_in(test_client)
        yield test_client


@pytest.fixture
def anonymous_client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


class RedisServer:
    """A real redis-server on 127.0.0.1, started for the test session."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not installed (apt-get install redis-server)")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc = subprocess.Popen(
            [
                binary,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._wait()

    def _wait(self) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(params=["memory", "redis"])
async def state(request: pytest.FixtureRequest) -> AsyncIterator[State]:
    """Each state backend in turn: the contract tests run against both."""
    if request.param == "memory":
        backend: State = MemoryState()
    else:
        server = request.getfixturevalue("redis_server")
        backend = RedisState(server.url)
        await backend._client.flushdb()  # type: ignore[attr-defined]
    yield backend
    await backend.close()
