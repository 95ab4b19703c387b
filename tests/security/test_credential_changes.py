"""Issue 57, point 4: a password change, a user's removal and a tenant's removal end that
user's sessions (and the tenant's API tokens) at once, on a real server (memory and Redis
state), through the real ``qwen-ui tenants`` CLI on the server's tenants file.

Each test makes a tenant of its own, so the suite's shared tenants are not disturbed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid

import httpx
import pytest

from tests.security.conftest import Site
from tests.support.server import log_in_with_form

pytestmark = pytest.mark.e2e

PASSWORD = re.compile(r"password \(shown once\): (\S+)")
TOKEN = re.compile(r"^(qwu_\S+)$", re.MULTILINE)
DEADLINE_S = 30.0  # generous: the server notices a changed tenants file on its next request


def tenants_cli(site: Site, *args: str) -> str:
    """``python -m qwen_ui.cli tenants ARGS`` on the site's home; its stdout."""
    env = {**os.environ, "QWEN_UI_HOME": str(site.server.home)}
    done = subprocess.run(
        [sys.executable, "-m", "qwen_ui.cli", "tenants", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def new_user(site: Site, user: str = "carol") -> tuple[str, str]:
    """A tenant of this test's own with one user; (tenant id, password)."""
    tenant = f"cred-{uuid.uuid4().hex[:10]}"
    match = PASSWORD.search(tenants_cli(site, "add-local", tenant, user))
    assert match is not None
    return tenant, match.group(1)


def logged_in(site: Site, tenant: str, user: str, password: str) -> httpx.Client:
    client = site.anonymous()
    log_in_with_form(client, tenant, user, password)
    client.headers["origin"] = site.url
    assert client.get("/api/v1/me").status_code == 200
    return client


def status_settles(client: httpx.Client, path: str = "/api/v1/me") -> int:
    """The status ``path`` answers once it stops answering 200 (or 200 at the deadline)."""
    deadline = time.monotonic() + DEADLINE_S
    status = client.get(path).status_code
    while status == 200 and time.monotonic() < deadline:
        time.sleep(0.2)
        status = client.get(path).status_code
    return status


def password_login(site: Site, tenant: str, user: str, password: str) -> int:
    with httpx.Client(base_url=site.url, timeout=20) as client:
        page = client.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        form = {"csrf": csrf.group(1), "tenant": tenant, "method": "local", "user": user}
        response = client.post(
            "/login",
            data={**form, "password": password, "next": "/"},
            headers={"origin": site.url, "accept": "application/json"},
        )
        return response.status_code


def test_a_password_change_ends_the_users_sessions(site: Site) -> None:
    tenant, old = new_user(site)
    browser = logged_in(site, tenant, "carol", old)
    other = logged_in(site, tenant, "carol", old)
    new = PASSWORD.search(tenants_cli(site, "passwd", tenant, "carol"))
    assert new is not None
    assert status_settles(browser) == 401
    assert other.get("/api/v1/me").status_code == 401  # every session of the user
    page = browser.get("/", headers={"accept": "text/html"})
    assert page.status_code == 303 and page.headers["location"].startswith("/login")
    assert password_login(site, tenant, "carol", old) == 401
    assert logged_in(site, tenant, "carol", new.group(1)).get("/api/v1/me").json()["user"] == (
        "carol"
    )


def test_a_password_change_leaves_other_users_logged_in(site: Site) -> None:
    tenant, carol_password = new_user(site)
    dave_password = PASSWORD.search(tenants_cli(site, "add-local", tenant, "dave"))
    assert dave_password is not None
    carol = logged_in(site, tenant, "carol", carol_password)
    dave = logged_in(site, tenant, "dave", dave_password.group(1))
    tenants_cli(site, "passwd", tenant, "carol")
    assert status_settles(carol) == 401
    assert dave.get("/api/v1/me").status_code == 200


def test_removing_a_user_ends_its_sessions(site: Site) -> None:
    tenant, carol_password = new_user(site)
    dave_password = PASSWORD.search(tenants_cli(site, "add-local", tenant, "dave"))
    assert dave_password is not None
    carol = logged_in(site, tenant, "carol", carol_password)
    dave = logged_in(site, tenant, "dave", dave_password.group(1))
    tenants_cli(site, "remove-user", tenant, "carol")
    assert status_settles(carol) == 401
    assert dave.get("/api/v1/me").status_code == 200
    assert password_login(site, tenant, "carol", carol_password) == 401


def test_removing_a_tenant_ends_its_sessions_and_tokens(site: Site) -> None:
    tenant, password = new_user(site)
    token = TOKEN.search(tenants_cli(site, "token", tenant, "--label", "gone"))
    assert token is not None
    api = httpx.Client(
        base_url=site.url, timeout=20, headers={"authorization": f"Bearer {token.group(1)}"}
    )
    site.clients.append(api)
    assert api.get("/api/v1/me").status_code == 200
    browser = logged_in(site, tenant, "carol", password)
    tenants_cli(site, "remove-tenant", tenant)
    assert status_settles(browser) == 401
    assert api.get("/api/v1/me").status_code == 401
    assert password_login(site, tenant, "carol", password) == 401


def test_a_tenant_made_again_does_not_revive_old_sessions(site: Site) -> None:
    """Removed, then added again with the same names: the old cookie stays dead."""
    tenant, password = new_user(site)
    browser = logged_in(site, tenant, "carol", password)
    tenants_cli(site, "remove-tenant", tenant)
    tenants_cli(site, "add-local", tenant, "carol")
    assert status_settles(browser) == 401
