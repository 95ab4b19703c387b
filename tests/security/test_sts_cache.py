"""Issue 26, hole 3: STS credentials that OSS now rejects cannot log in from the OSS
verification cache (a real server, our signature-verifying OSS server). The cache entry
is dropped when OSS rejects the key for any session, never outlives the stated expiry,
and STS credentials without a stated expiry are always checked with OSS.

Issue 57, point 6: a stated expiry later than the real one buys nothing past the time OSS
confirmed the credentials plus the re-check interval, for the cache and for the sessions
it opens."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from tests.auth.conftest import ACME_STS
from tests.support.auth_site import AuthSite, log_in, oss_form

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RECHECK_S = 5  # QWEN_UI_STS_RECHECK_S (its minimum)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthSite]:
    """A server with the OSS world of its own (overrides the suite's shared ``site``)."""
    env = {"QWEN_UI_STS_RECHECK_S": str(RECHECK_S), "QWEN_UI_LOG_LEVEL": "debug"}
    site = AuthSite.start(tmp_path_factory.mktemp("home"), env)
    yield site
    site.stop()


@pytest.fixture
def sts(site: AuthSite) -> Iterator[AuthSite]:
    """The STS key valid again for each test (tests revoke it)."""
    key = site.oss.keys[ACME_STS.key_id]
    key.expires_at = site.oss.now() + 3600
    yield site
    key.expires_at = site.oss.now() + 3600


def expiring_in(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def revoke(site: AuthSite) -> None:
    """OSS answers SecurityTokenExpired for the STS key from now on."""
    site.oss.keys[ACME_STS.key_id].expires_at = site.oss.now() - 1


async def test_a_token_rejected_for_one_session_cannot_log_in_again(sts: AuthSite) -> None:
    async with sts.client("127.0.1.1") as first, sts.client("127.0.1.2") as second:
        assert (await log_in(first, "acme", oss_form(ACME_STS, expiring_in(3600)))).is_success
        assert (await first.get("/api/v1/me")).status_code == 200
        revoke(sts)
        await asyncio.sleep(RECHECK_S + 0.5)
        assert (await first.get("/api/v1/me")).status_code == 401  # its re-check failed
        again = await log_in(second, "acme", oss_form(ACME_STS, expiring_in(3600)))
        assert again.status_code == 401, again.text
        assert (await second.get("/api/v1/me")).status_code == 401


async def test_without_a_stated_expiry_oss_is_always_asked(sts: AuthSite) -> None:
    async with sts.client("127.0.1.3") as client:
        assert (await log_in(client, "acme", oss_form(ACME_STS, expiring_in(3600)))).is_success
        revoke(sts)
        calls = len(sts.oss.calls(ACME_STS.key_id))
        again = await log_in(client, "acme", oss_form(ACME_STS))
        assert again.status_code == 401, again.text
        assert len(sts.oss.calls(ACME_STS.key_id)) == calls + 1


async def test_an_entry_never_outlives_the_stated_expiry(sts: AuthSite) -> None:
    async with sts.client("127.0.1.4") as client:
        assert (await log_in(client, "acme", oss_form(ACME_STS, expiring_in(3)))).is_success
        revoke(sts)  # OSS will say so only when asked
        await asyncio.sleep(3.5)
        again = await log_in(client, "acme", oss_form(ACME_STS, expiring_in(3600)))
        assert again.status_code == 401, again.text


async def test_a_valid_token_with_a_stated_expiry_is_served_from_the_cache(
    sts: AuthSite,
) -> None:
    async with sts.client("127.0.1.5") as client:
        form = oss_form(ACME_STS, expiring_in(3600))
        assert (await log_in(client, "acme", form)).is_success
        calls = len(sts.oss.calls(ACME_STS.key_id))
        assert (await log_in(client, "acme", form)).is_success
        assert len(sts.oss.calls(ACME_STS.key_id)) == calls
    assert "answered from the cache" in sts.server.output()


async def test_a_later_stated_expiry_counts_only_until_the_recheck(sts: AuthSite) -> None:
    """The login states an expiry an hour away; OSS's real one is 2 s away. A login from
    the cache after the real expiry is let in only within RECHECK_S of OSS's confirmation,
    and its session re-checks when that confirmation is RECHECK_S old."""
    sts.oss.keys[ACME_STS.key_id].expires_at = sts.oss.now() + 2
    form = oss_form(ACME_STS, expiring_in(3600))
    async with (
        sts.client("127.0.1.6") as first,
        sts.client("127.0.1.7") as second,
        sts.client("127.0.1.8") as third,
    ):
        assert (await log_in(first, "acme", form)).is_success
        confirmed = time.monotonic()  # OSS confirmed the credentials before this
        await asyncio.sleep(2.5)  # past the real expiry
        calls = len(sts.oss.calls(ACME_STS.key_id))
        assert (await log_in(second, "acme", form)).is_success  # from the cache
        assert len(sts.oss.calls(ACME_STS.key_id)) == calls
        await asyncio.sleep(max(0.0, confirmed + RECHECK_S + 0.5 - time.monotonic()))
        again = await log_in(third, "acme", form)
        assert again.status_code == 401, again.text  # the cache no longer answers
        assert len(sts.oss.calls(ACME_STS.key_id)) == calls + 1
        assert (await second.get("/api/v1/me")).status_code == 401  # its re-check was due
