"""Point 11 (second half) of issue 57: a real ``qwen-ui serve`` writes each log line once:
its own lines, uvicorn's, and those of libraries that print on their own and also pass
their lines on to the root logger (huggingface_hub, imported with Gradio)."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.server import ServerProcess

pytestmark = pytest.mark.e2e

LIBRARY_LOG = Path(__file__).parent.parent / "support" / "library_log"
LINE = "library line from huggingface_hub"  # its sitecustomize.py writes it on SIGUSR1


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    paths = [str(LIBRARY_LOG), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {"PYTHONPATH": os.pathsep.join(paths), "QWEN_UI_LOG_LEVEL": "info"}
    process = ServerProcess(tmp_path_factory.mktemp("home"), env=env)
    process.wait_for("/login")
    yield process
    process.stop()


def _lines(server: ServerProcess, needle: str) -> list[str]:
    return [line for line in server.output().splitlines() if needle in line]


def _wait_for(server: ServerProcess, needle: str) -> list[str]:
    deadline = time.monotonic() + 30
    while not _lines(server, needle) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # a second copy of the line would be written at once
    return _lines(server, needle)


def test_a_library_line_is_written_once_in_the_server_format(server: ServerProcess) -> None:
    server.proc.send_signal(signal.SIGUSR1)
    written = _wait_for(server, f"{LINE} 1")
    assert len(written) == 1, written
    assert written[0].endswith(f"WARNING huggingface_hub.test: {LINE} 1")


def test_own_and_uvicorn_lines_are_written_once(server: ServerProcess) -> None:
    marker = f"/healthz?once={time.monotonic_ns()}"
    assert httpx.get(server.url + marker).status_code == 200
    assert len(_wait_for(server, marker)) == 1  # uvicorn's access line
    ready = _lines(server, "INFO qwen_ui.boot: qwen-ui ready on")
    assert len(ready) == 1, ready
    started = [line for line in server.output().splitlines() if "Application startup" in line]
    assert len(started) == 1, started
    lines = [line for line in server.output().splitlines() if line.strip()]
    twice = [line for line, n in Counter(lines).items() if n > 1 and "GET /login" not in line]
    assert twice == []
