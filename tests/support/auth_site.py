"""A real ``qwen-ui serve`` process logging tenants in against our signature-verifying OSS
server, a redis-server the test can stop and start again on the same port, and concurrent
login bursts through the real form (as many browsers would send them).

Used by the issue-26 replays in tests/security/ (throttling, the STS cache, readiness,
debug logging)."""

from __future__ import annotations

import asyncio
import re
import shutil
import socket
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx

from qwen_ui.auth import tenants as tenants_file
from qwen_ui.auth.tokens import add_token, new_token
from tests.auth.conftest import Keys, make_oss, write_world
from tests.conftest import free_port
from tests.support.oss_server import FakeOSS
from tests.support.server import ServerProcess

START_TIMEOUT_S = 240.0  # a loaded CI machine needs more than a minute to import Gradio
CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')


class RedisProcess:
    """redis-server on 127.0.0.1:``port`` that can be stopped and started again there."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisProcess:
        binary = shutil.which("redis-server")
        assert binary is not None, "redis-server is not installed (apt-get install redis-server)"
        args = ["--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--dir"]
        self.proc = subprocess.Popen(
            [binary, *args, str(self.workdir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def kill(self) -> None:
        """An outage: the process dies at once, open connections are cut."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None


@dataclass
class AuthSite:
    """A server whose tenants are the auth suite's world (tests/auth/conftest.py): OSS
    tenants acme and beta on ``oss``, local tenant school (alice, bob)."""

    server: ServerProcess
    oss: FakeOSS
    token: str  # an API token of the local tenant school

    @classmethod
    def start(cls, home: Path, env: dict[str, str] | None = None) -> AuthSite:
        oss = make_oss()
        write_world(home / "tenants.toml", oss.endpoint)
        token = give_token(home / "tenants.toml", "school")
        base = {
            "QWEN_UI_ALLOW_INSECURE_OSS_ENDPOINTS": "true",
            "QWEN_UI_OSS_TIMEOUT_S": "3",
            "QWEN_UI_LOGIN_MAX_FAILURES": "5",
            "QWEN_UI_LOGIN_MAX_FAILURES_PER_IP": "12",
        }
        server = ServerProcess(home, env={**base, **(env or {})})
        try:
            server.wait_for("/login", timeout=START_TIMEOUT_S)
        except BaseException:
            server.stop()
            oss.stop()
            raise
        return cls(server, oss, token)

    @property
    def url(self) -> str:
        return self.server.url

    def client(self, source: str = "127.0.0.1") -> httpx.AsyncClient:
        """A browser at address ``source`` (any 127.x.y.z: each is its own client IP)."""
        return httpx.AsyncClient(
            base_url=self.url,
            transport=httpx.AsyncHTTPTransport(local_address=source),
            timeout=60,
            follow_redirects=False,
            headers={"origin": self.url},
        )

    def api(self) -> httpx.AsyncClient:
        """A script's client: the API token, no cookies, no Origin."""
        return httpx.AsyncClient(
            base_url=self.url, timeout=120, headers={"authorization": f"Bearer {self.token}"}
        )

    def stop(self) -> None:
        self.server.stop()
        self.oss.stop()


def give_token(path: Path, tenant_id: str) -> str:
    tenants = tenants_file.load(path, allow_insecure=True)
    token, record = new_token("security suite")
    tenant = add_token(tenants.tenants[tenant_id], record)
    tenants_file.save(path, tenants_file.with_tenant(tenants, tenant))
    return token


async def csrf_token(client: httpx.AsyncClient) -> str:
    page = await client.get("/login")
    match = CSRF_RE.search(page.text)
    assert match is not None, page.text[:300]
    return match.group(1)


def oss_form(keys: Keys, expiration: str = "") -> dict[str, str]:
    return {
        "method": "oss",
        "key_id": keys.key_id,
        "key_secret": keys.secret,
        "sts_token": keys.sts_token or "",
        "sts_expiration": expiration,
    }


def local_form(user: str, password: str) -> dict[str, str]:
    return {"method": "local", "user": user, "password": password}


async def log_in(
    client: httpx.AsyncClient, tenant: str, fields: dict[str, str], csrf: str | None = None
) -> httpx.Response:
    """POST the login form, asking for JSON (200 with the principal, or the error shape)."""
    data = {"csrf": csrf or await csrf_token(client), "tenant": tenant, "next": "/", **fields}
    return await client.post("/login", data=data, headers={"accept": "application/json"})


async def burst(
    client: httpx.AsyncClient, tenant: str, forms: list[dict[str, str]]
) -> list[httpx.Response]:
    """All ``forms`` posted at once, sharing one CSRF nonce (one browser, many tabs)."""
    csrf = await csrf_token(client)
    return list(await asyncio.gather(*(log_in(client, tenant, f, csrf) for f in forms)))


def statuses(responses: list[httpx.Response]) -> Counter[int]:
    return Counter(response.status_code for response in responses)
