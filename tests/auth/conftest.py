"""The auth suite's world: our signature-verifying OSS server, three tenants, an app on
either state backend, and a guard that fails any test whose DEBUG log lines (root logger,
oss2, urllib3 and all) or audit log contain a secret, STS token, password, session id or
API token."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient
from httpx import Response

from qwen_ui.auth.oss_client import quiet_oss2_logging
from qwen_ui.auth.tenants import Limits, OSSConfig, Tenant
from qwen_ui.server import create_app
from qwen_ui.settings import Settings
from tests.support.auth import TEST_PASSWORD, add_tenants, local_tenant
from tests.support.oss_server import FakeOSS

REGION = "cn-test"
BUCKET = "shared-bucket"
OTHER_BUCKET = "beta-private"


@dataclass(frozen=True)
class Keys:
    key_id: str
    secret: str
    sts_token: str | None = None


ACME = Keys("LTAIacmeReader000001", "acme-secret-0001-abcdefghijklmn")
ACME_NO_RIGHTS = Keys("LTAIacmeNoRights0001", "acme-secret-0002-abcdefghijklmn")
ACME_UNLISTED = Keys("LTAIacmeUnlisted0001", "acme-secret-0003-abcdefghijklmn")
ACME_STS = Keys("STS.acmeTemporary01", "acme-sts-secret-abcdefghijklmnop", "sts-token-" + "Q" * 60)
BETA = Keys("LTAIbetaReader000001", "beta-secret-0001-abcdefghijklmn")
ALL_KEYS = (ACME, ACME_NO_RIGHTS, ACME_UNLISTED, ACME_STS, BETA)

ACME_OBJECTS = {
    "acme/cat.png": b"\x89PNG acme cat",
    "acme/photos/dog.jpg": b"\xff\xd8 acme dog",
    "acme/photos/big.jpg": b"x" * 4096,
}
BETA_OBJECTS = {"beta/secret-plan.png": b"\x89PNG beta only"}


@dataclass
class SecretWatch:
    """Strings that must never be logged; tests add session ids and tokens they see."""

    values: set[str] = field(default_factory=set)

    def add(self, *values: str | None) -> None:
        self.values.update(v for v in values if v)


def make_oss() -> FakeOSS:
    oss = FakeOSS(region=REGION).start()
    oss.add_bucket(BUCKET, {**ACME_OBJECTS, **BETA_OBJECTS})
    oss.add_bucket(OTHER_BUCKET, {"beta/other.png": b"other bucket"})
    oss.add_key(ACME.key_id, ACME.secret, {BUCKET: ["acme/"]})
    oss.add_key(ACME_NO_RIGHTS.key_id, ACME_NO_RIGHTS.secret, {BUCKET: ["elsewhere/"]})
    oss.add_key(ACME_UNLISTED.key_id, ACME_UNLISTED.secret, {BUCKET: ["acme/"]})
    oss.add_key(
        ACME_STS.key_id,
        ACME_STS.secret,
        {BUCKET: ["acme/"]},
        sts_token=ACME_STS.sts_token,
        expires_at=oss.now() + 3600,
    )
    oss.add_key(BETA.key_id, BETA.secret, {BUCKET: ["beta/"], OTHER_BUCKET: ["beta/"]})
    return oss


def oss_tenant(tenant_id: str, endpoint: str, prefix: str, allowed: list[str]) -> Tenant:
    config = OSSConfig(
        region=REGION, endpoint=endpoint, bucket=BUCKET, prefix=prefix, allowed_key_ids=allowed
    )
    return Tenant(id=tenant_id, name=tenant_id.title(), kind="oss", oss=config, limits=Limits())


def write_world(path: Path, endpoint: str) -> None:
    add_tenants(
        path,
        oss_tenant("acme", endpoint, "acme/", [ACME.key_id, ACME_NO_RIGHTS.key_id, "STS.*"]),
        oss_tenant("beta", endpoint, "beta/", []),
        local_tenant("school", ("alice", "bob")),
    )


@pytest.fixture
def oss() -> Iterator[FakeOSS]:
    server = make_oss()
    yield server
    server.stop()


@pytest.fixture(params=["memory", "redis"])
def redis_url(request: pytest.FixtureRequest) -> str | None:
    if request.param == "memory":
        return None
    url: str = request.getfixturevalue("redis_server").url
    redis.Redis.from_url(url).flushdb()
    return url


@pytest.fixture
def auth_settings(home: Path, oss: FakeOSS, redis_url: str | None) -> Settings:
    settings = Settings(
        home=home,
        redis_url=redis_url,
        allow_insecure_oss_endpoints=True,
        login_max_failures=3,
        login_max_failures_per_ip=8,
        login_backoff_s=30,
        oss_timeout_s=2,
    )
    write_world(settings.tenants_path, oss.endpoint)
    return settings


@pytest.fixture
def web(auth_settings: Settings) -> Iterator[TestClient]:
    """An anonymous browser-like client of a fresh app (no redirects followed)."""
    with TestClient(create_app(auth_settings), follow_redirects=False) as client:
        yield client


@pytest.fixture(autouse=True)
def secret_watch(caplog: pytest.LogCaptureFixture, home: Path) -> Iterator[SecretWatch]:
    caplog.set_level(logging.DEBUG)
    for name in ("urllib3", "httpx", "httpcore", "qwen_ui", "redis", "starlette", "fastapi"):
        logging.getLogger(name).setLevel(logging.NOTSET)
    quiet_oss2_logging()  # as the server does at start (test_oss_client shows why)
    watch = SecretWatch()
    watch.add(TEST_PASSWORD, *(k.secret for k in ALL_KEYS), *(k.sts_token for k in ALL_KEYS))
    yield watch
    leaks = find_leaks(watch.values, captured_lines(caplog.records, home))
    assert not leaks, f"a secret appears in {len(leaks)} log line(s): {leaks[0][:200]}"


def captured_lines(records: list[logging.LogRecord], home: Path) -> list[str]:
    """Every captured log line (message, raw args, traceback) and every audit line."""
    lines = [record.getMessage() for record in records]
    lines += [str(record.args) for record in records if record.args]
    lines += [record.exc_text or "" for record in records]
    audit = home / "logs" / "audit.jsonl"
    if audit.exists():
        lines += audit.read_text().splitlines()
    return lines


def find_leaks(values: set[str], lines: list[str]) -> list[str]:
    return [line for line in lines if any(value in line for value in values)]


# --- the login form ----------------------------------------------------------------------

CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')
ERROR_RE = re.compile(r'<p class="error" role="alert">(.*?)</p>')


def csrf_of(client: TestClient) -> str:
    page = client.get("/login")
    assert page.status_code == 200
    match = CSRF_RE.search(page.text)
    assert match is not None
    return match.group(1)


def oss_fields(keys: Keys) -> dict[str, str]:
    return {
        "method": "oss",
        "key_id": keys.key_id,
        "key_secret": keys.secret,
        "sts_token": keys.sts_token or "",
    }


def local_fields(user: str, password: str = TEST_PASSWORD) -> dict[str, str]:
    return {"method": "local", "user": user, "password": password}


def submit(client: TestClient, tenant: str, fields: dict[str, str], **extra: str) -> Response:
    data = {"csrf": csrf_of(client), "tenant": tenant, "next": "/", **fields, **extra}
    return client.post("/login", data=data)


def error_of(response: Response) -> str:
    match = ERROR_RE.search(response.text)
    assert match is not None, response.text[:300]
    return match.group(1)


def session_cookie(client: TestClient) -> str | None:
    return client.cookies.get("qwen_session") or client.cookies.get("__Host-qwen_session")
