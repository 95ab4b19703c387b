"""Issue 26, hole 12: at QWEN_UI_LOG_LEVEL=debug a real server writes debug lines, its own
on the auth path (login outcomes, throttle decisions, cache hits, sessions) and its
libraries' (urllib3 talking to OSS), and still no secret anywhere in its log or audit log:
passwords, AccessKey secrets, STS tokens, session cookie values, API tokens."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.auth.conftest import ACME, ACME_STS, Keys
from tests.support.auth import TEST_PASSWORD
from tests.support.auth_site import AuthSite, local_form, log_in, oss_form

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WRONG_PASSWORD = "wrong-horse-battery-staple"
WRONG_SECRET = "wrong-secret-0001-abcdefghijklmn"


@pytest.fixture
def site(tmp_path: Path) -> Iterator[AuthSite]:
    """A server with the OSS world of its own (overrides the suite's shared ``site``)."""
    site = AuthSite.start(tmp_path, {"QWEN_UI_LOG_LEVEL": "debug"})
    yield site
    site.stop()


async def exercise(site: AuthSite) -> set[str]:
    """Log in and out every way the server knows; returns the secrets it saw."""
    secrets = {TEST_PASSWORD, WRONG_PASSWORD, WRONG_SECRET, site.token, ACME.secret}
    secrets |= {ACME_STS.secret, ACME_STS.sts_token or ""}
    expiry = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    async with site.client("127.0.2.1") as browser:
        assert (await log_in(browser, "school", local_form("alice", WRONG_PASSWORD))).status_code
        assert (await log_in(browser, "school", local_form("bob", TEST_PASSWORD))).is_success
        secrets |= set(browser.cookies.values())
        assert (await log_in(browser, "acme", oss_form(ACME_STS, expiry))).is_success
        assert (await log_in(browser, "acme", oss_form(ACME_STS, expiry))).is_success  # cached
        wrong = Keys(ACME.key_id, WRONG_SECRET)
        assert (await log_in(browser, "acme", oss_form(wrong))).status_code == 401
        assert (await log_in(browser, "acme", oss_form(ACME))).is_success
        secrets |= set(browser.cookies.values())
        me = (await browser.get("/api/v1/me")).json()
        logout = await browser.post("/logout", data={"csrf": me["logout_csrf"]})
        assert logout.status_code == 303
    async with site.api() as api:
        assert (await api.get("/api/v1/me")).status_code == 200
    return secrets


async def test_debug_lines_on_the_auth_path_and_no_secret_anywhere(site: AuthSite) -> None:
    secrets = await exercise(site)
    log = site.server.output()
    for line in (
        "DEBUG qwen_ui.auth.service: login attempt for tenant school: invalid",
        "DEBUG qwen_ui.auth.service: login attempt for tenant acme: ok",
        "DEBUG qwen_ui.auth.throttle: login slot reserved",
        "DEBUG qwen_ui.auth.oss: OSS key check for tenant acme answered from the cache",
        "DEBUG qwen_ui.auth.sessions: session created for school/bob",
        "DEBUG qwen_ui.web.login: login by acme/STS.acmeTemporary01 replaced the browser's",
        "DEBUG qwen_ui.auth.sessions: session deleted",
        "DEBUG urllib3.connectionpool:",
    ):
        assert line in log, line
    audit = (site.server.home / "logs" / "audit.jsonl").read_text()
    leaks = [s for s in secrets if s and (s in log or s in audit)]
    assert not leaks, f"{len(leaks)} secret(s) in the log"
    assert "OSS4-HMAC-SHA256" not in log  # oss2's request headers stay out
