"""A real ``qwen-ui serve`` process on a free loopback port, and logging in through the
real login form (as a browser would)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import free_port

PASSWORD_LINE = re.compile(r"password \(shown once\): (\S+)")
HIDDEN = re.compile(r'<input type="hidden" name="(\w+)" value="([^"]*)"')
PACED = Path(__file__).parent / "paced"  # its sitecustomize paces the engine's steps
STEP_S = 0.03  # the pause after each step of a paced server's engine


class ServerProcess:
    """``python -m qwen_ui.cli serve`` with QWEN_UI_HOME under ``home``. ``command`` replaces
    ``python -m qwen_ui.cli`` (e.g. an installed ``qwen-ui`` script); ``env`` entries of
    None are removed from the environment."""

    def __init__(
        self,
        home: Path,
        *args: str,
        env: Mapping[str, str | None] | None = None,
        command: list[str] | None = None,
        cwd: Path | None = None,
        port: int | None = None,
    ) -> None:
        self.home = home
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = home / "server.log"
        self._log = self.log_path.open("a")
        merged = {**os.environ, "QWEN_UI_HOME": str(home), "PYTHONUNBUFFERED": "1", **(env or {})}
        prefix = command or [sys.executable, "-m", "qwen_ui.cli"]
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [*prefix, "serve", "--port", str(self.port), *args],
            env={k: v for k, v in merged.items() if v is not None},
            cwd=cwd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_for(self, path: str, status: int = 200, timeout: float = 180.0) -> float:
        """Seconds from process start until ``path`` answered ``status``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.output()}")
            try:
                if httpx.get(self.url + path, timeout=1.0).status_code == status:
                    return time.monotonic() - self.started
            except httpx.TransportError:
                pass
            time.sleep(0.02)
        output = self.output()
        self.stop()  # a fixture that fails here never reaches its own teardown
        raise TimeoutError(f"{path} never answered {status}:\n{output}")

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def demo_password(self) -> str:
        match = PASSWORD_LINE.search(self.output())
        assert match, self.output()
        return match.group(1)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self._log.close()


def log_in_with_form(client: httpx.Client, tenant: str, user: str, password: str) -> None:
    """GET /login, then POST the form with its hidden CSRF fields, as a browser does."""
    page = client.get("/login")
    fields = dict(HIDDEN.findall(page.text))
    form = {**fields, "tenant": tenant, "method": "local", "user": user, "password": password}
    response = client.post("/login", data=form, headers={"Origin": str(client.base_url)})
    assert response.status_code in (200, 303), response.text[:500]
    assert "error" not in response.headers.get("location", ""), response.headers


def tiny_model_server(
    factory: Any, max_new_tokens: int, endless: bool = False, paced: bool | None = None
) -> ServerProcess:
    """A real server on the engine tests' tiny random model, installed in a fresh store; its
    torch computes on one thread (more only contend with the browser on a small machine).

    ``endless``: every answer runs to ``max_new_tokens`` (no stop token is ever picked),
    for tests that press Stop while an answer streams. ``paced`` (by default as
    ``endless``): tokens come at most at ``STEP_S``'s pace (``paced/sitecustomize.py``),
    so an answer spans several of the page's frames even on a fast machine."""
    from qwen_ui.store import ModelStore
    from tests.engine.conftest import TINY_ID
    from tests.engine.support import build_tiny_model

    home = factory.mktemp("home")
    model = build_tiny_model(factory.mktemp("tiny") / "bf16", endless=endless)
    ModelStore(home / "models").install(model, TINY_ID, "bf16")
    env = {
        "QWEN_UI_MODEL_ID": TINY_ID,
        "QWEN_UI_MODEL_REVISION": "bf16",
        "QWEN_UI_DEVICE": "cpu",
        "QWEN_UI_MAX_PIXELS": str(112 * 112),
        "QWEN_UI_MAX_NEW_TOKENS": str(max_new_tokens),
        "OMP_NUM_THREADS": "1",
    }
    if paced or (paced is None and endless):
        paths = [str(PACED), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        env["PYTHONPATH"] = os.pathsep.join(paths)
        env["QWEN_UI_TEST_STEP_S"] = str(STEP_S)
    process = ServerProcess(home, env=env)
    process.wait_for("/login")
    return process
