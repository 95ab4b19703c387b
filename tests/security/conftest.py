"""The security suite's fixtures: a real ``qwen-ui serve`` process per state backend
(memory, and real Redis where state matters), two local tenants and an API token, a temp
folder of its own (to see what a request leaves behind), and raw-socket requests for the
cases that httpx cannot send (a body that never arrives, a 2 GiB promise).

The servers are started once per test session and shared by the suite's files."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from qwen_ui.auth.tokens import add_token, new_token
from qwen_ui.settings import Settings
from tests.support.auth import TEST_PASSWORD, add_tenants, local_tenant
from tests.support.server import ServerProcess, log_in_with_form

MiB = 1024 * 1024
# Small limits keep the size tests cheap: the request cap is about 2 MiB + framing.
SITE_ENV = {
    "QWEN_UI_MAX_IMAGE_BYTES": str(MiB),
    "QWEN_UI_MAX_IMAGES": "2",
    "QWEN_UI_BODY_READ_TIMEOUT_S": "2",
    "QWEN_UI_LOG_LEVEL": "info",
}
BACKENDS = ["memory", pytest.param("redis", marks=pytest.mark.redis)]


@dataclass
class Site:
    """One server process and what the tests need to attack it."""

    server: ServerProcess
    backend: str
    tmp: Path  # the process's TMPDIR (Starlette spools multipart files here)
    uploads: Path  # Gradio's upload folder (GRADIO_TEMP_DIR)
    token: str  # an API token of tenant "demo"
    settings: Settings
    clients: list[httpx.Client] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.server.url

    def anonymous(self) -> httpx.Client:
        client = httpx.Client(base_url=self.url, follow_redirects=False, timeout=20)
        self.clients.append(client)
        return client

    def user(self, tenant: str = "demo", user: str = "demo") -> httpx.Client:
        """Logged in through the real form; sends its page's Origin, as a browser does."""
        client = self.anonymous()
        log_in_with_form(client, tenant, user, TEST_PASSWORD)
        client.headers["origin"] = self.url
        return client

    def session_cookie(self, client: httpx.Client) -> str:
        return "; ".join(f"{name}={value}" for name, value in client.cookies.items())

    def open_temp_files(self) -> list[str]:
        """Files the server process holds open under its TMPDIR (spooled uploads)."""
        fds = Path(f"/proc/{self.server.proc.pid}/fd")
        held = []
        for fd in fds.iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith(str(self.tmp)):
                held.append(target)
        return held

    def folder_bytes(self, folder: Path) -> int:
        return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())

    def close(self) -> None:
        for client in self.clients:
            client.close()
        self.server.stop()


def _start(factory: pytest.TempPathFactory, backend: str, redis_url: str | None) -> Site:
    home = factory.mktemp(f"sec-{backend}")
    tmp = home / "tmp"
    uploads = tmp / "gradio"
    tmp.mkdir()
    settings = Settings(home=home)
    token, record = new_token("security suite")
    demo = add_token(local_tenant("demo", ("demo",)), record)
    add_tenants(settings.tenants_path, demo, local_tenant("acme", ("alice", "bob")))
    env = {**SITE_ENV, "TMPDIR": str(tmp), "GRADIO_TEMP_DIR": str(uploads)}
    if redis_url is not None:
        env["QWEN_UI_REDIS_URL"] = redis_url
    server = ServerProcess(home, env=env)
    server.wait_for("/login", timeout=120)
    return Site(server, backend, tmp, uploads, token, Settings(home=home, **_settings_of(env)))


def _settings_of(env: dict[str, str]) -> dict[str, str]:
    prefix = "QWEN_UI_"
    return {k[len(prefix) :].lower(): v for k, v in env.items() if k.startswith(prefix)}


@pytest.fixture(scope="session")
def _sites(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Site]]:
    started: dict[str, Site] = {}
    yield started
    for site in started.values():
        site.close()


def _site(request: pytest.FixtureRequest, backend: str) -> Site:
    started: dict[str, Site] = request.getfixturevalue("_sites")
    if backend not in started:
        redis_url = None
        if backend == "redis":
            redis_url = request.getfixturevalue("redis_server").url
        factory = request.getfixturevalue("tmp_path_factory")
        started[backend] = _start(factory, backend, redis_url)
    return started[backend]


@pytest.fixture(params=BACKENDS)
def site(request: pytest.FixtureRequest) -> Site:
    """A real server on each state backend in turn (for holes where state matters)."""
    return _site(request, str(request.param))


@pytest.fixture
def memory_site(request: pytest.FixtureRequest) -> Site:
    """The real server on the memory backend (for holes where state does not matter)."""
    return _site(request, "memory")


@dataclass
class RawAnswer:
    status: int
    head: str
    body: bytes
    seconds: float  # from the end of what was sent to the status line
    closed: bool  # the server closed the connection after answering


def raw_request(url: str, head: str, body: bytes = b"", wait_s: float = 10.0) -> RawAnswer:
    """Send ``head`` (request line and headers, without the blank line) and ``body`` over a
    plain socket, then read what the server answers within ``wait_s``."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait_s) as sock:
        sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n\r\n" + body)
        sent = time.monotonic()
        data, seconds, closed = _read_answer(sock, sent, wait_s)
    head_text, _, rest = data.partition(b"\r\n\r\n")
    status_line = head_text.split(b"\r\n", 1)[0].decode(errors="replace")
    status = int(status_line.split()[1]) if status_line.startswith("HTTP/") else 0
    return RawAnswer(status, head_text.decode(errors="replace"), rest, seconds, closed)


def _read_answer(sock: socket.socket, sent: float, wait_s: float) -> tuple[bytes, float, bool]:
    data = b""
    seconds = wait_s
    deadline = sent + wait_s
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return data, seconds, False
        except ConnectionResetError:
            return data, seconds, True
        if not chunk:
            return data, seconds, True
        if not data:
            seconds = time.monotonic() - sent
        data += chunk
    return data, seconds, False


def multipart(boundary: str, fields: dict[str, str], files: list[tuple[str, bytes]]) -> bytes:
    """A complete multipart/form-data body (text fields, then ``images`` parts)."""
    out = b""
    for name, value in fields.items():
        out += (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
        ).encode()
    for name, data in files:
        out += (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="images"; '
                f'filename="{name}"\r\nContent-Type: image/png\r\n\r\n'
            ).encode()
            + data
            + b"\r\n"
        )
    return out + f"--{boundary}--\r\n".encode()
