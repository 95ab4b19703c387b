"""Test helpers for logged-in clients: tenants files and sessions without the login form."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient

from qwen_ui.auth import tenants as tenants_file
from qwen_ui.auth.passwords import hash_password
from qwen_ui.auth.principal import OSSCredentials, Principal
from qwen_ui.auth.sessions import credential_mark
from qwen_ui.auth.tenants import Tenant, TenantsFile
from qwen_ui.services import services_of
from qwen_ui.web.auth import SESSION_COOKIE, cookie_name

TEST_PASSWORD = "correct-horse-battery-staple"


@cache
def test_password_hash() -> str:
    """One scrypt hash of TEST_PASSWORD per test session (hashing costs ~50 ms)."""
    return hash_password(TEST_PASSWORD)


def local_tenant(tenant_id: str = "demo", users: tuple[str, ...] = ("demo",)) -> Tenant:
    return Tenant(
        id=tenant_id,
        name=tenant_id.title(),
        kind="local",
        users={user: test_password_hash() for user in users},
    )


def add_tenants(path: Path, *tenants: Tenant) -> None:
    """Add (or replace) tenants in the tenants file at ``path``."""
    current = tenants_file.load(path, allow_insecure=True)
    merged = {**current.tenants, **{t.id: t for t in tenants}}
    tenants_file.save(path, TenantsFile(tenants=merged))


def log_in(
    client: TestClient,
    principal: Principal | None = None,
    credentials: OSSCredentials | None = None,
) -> str:
    """Open a session for ``principal`` (its tenant must exist) and set the cookie (and the
    page's own Origin) on the client; returns the session id. The login form itself is
    tested in tests/auth."""
    app = client.app
    principal = principal or Principal("demo", "demo")
    if (
        principal.method == "password"
        and services_of(app).auth.registry.get(principal.tenant) is None
    ):
        add_tenants(
            services_of(app).settings.tenants_path,
            local_tenant(principal.tenant, (principal.user,)),
        )  # type: ignore[attr-defined]
    session_id = client.portal.call(open_session, app, principal, credentials)  # type: ignore[union-attr]
    https = str(client.base_url).startswith("https")
    client.cookies.set(cookie_name(SESSION_COOKIE, https), session_id)
    client.headers["origin"] = str(client.base_url).rstrip("/")  # as a browser's page does
    return str(session_id)


async def open_session(
    app: FastAPI, principal: Principal, credentials: OSSCredentials | None = None
) -> str:
    """A session as a login opens it (marked with the credential its tenant holds now, so
    it ends when that changes); returns the session id."""
    auth = services_of(app).auth
    tenant = auth.registry.get(principal.tenant)
    mark = credential_mark(auth.keys, tenant, principal) if tenant is not None else None
    session_id, _session = await auth.sessions.create(principal, credentials, credential=mark or "")
    return session_id
