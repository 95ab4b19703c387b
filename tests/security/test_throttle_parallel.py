"""Issue 26, hole 2: parallel wrong guesses against a real server, on the memory and the
Redis state backends. At most the limit reach the verifier; the rest get 429 with
Retry-After. Each burst comes from its own loopback address (its own client IP)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.auth.conftest import ACME_STS, Keys
from tests.conftest import RedisServer
from tests.support.auth import TEST_PASSWORD
from tests.support.auth_site import AuthSite, burst, local_form, log_in, oss_form, statuses

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LIMIT = 5  # QWEN_UI_LOGIN_MAX_FAILURES in AuthSite
PER_IP = 12  # QWEN_UI_LOGIN_MAX_FAILURES_PER_IP
GUESSES = 40


@pytest.fixture(scope="module", params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def site(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AuthSite]:
    """A server with the OSS world of its own (overrides the suite's shared ``site``)."""
    env = {}
    if request.param == "redis":
        redis: RedisServer = request.getfixturevalue("redis_server")
        env["QWEN_UI_REDIS_URL"] = redis.url.replace("/0", "/3")  # a database of its own
    site = AuthSite.start(tmp_path_factory.mktemp("home"), env)
    yield site
    site.stop()


def assert_throttled(responses: list, reached: int, limit: int) -> None:  # type: ignore[type-arg]
    counts = statuses(responses)
    assert reached <= limit, counts
    assert counts[401] <= limit and counts[429] >= GUESSES - limit, counts
    assert set(counts) <= {401, 429}, counts
    for response in responses:
        if response.status_code == 429:
            assert int(response.headers["retry-after"]) >= 1


async def test_parallel_wrong_passwords_for_one_user(site: AuthSite) -> None:
    async with site.client("127.0.0.2") as client:
        forms = [local_form("alice", f"wrong-{n}") for n in range(GUESSES)]
        responses = await burst(client, "school", forms)
        # every answer that reached the password check is a 401, the rest were throttled
        assert_throttled(responses, statuses(responses)[401], LIMIT)
        late = await log_in(client, "school", local_form("alice", TEST_PASSWORD))
        assert late.status_code == 429  # even the right password waits out the lock


async def test_parallel_wrong_secrets_for_one_oss_key(site: AuthSite) -> None:
    wrong = Keys(ACME_STS.key_id, "not-the-secret-0000000000000", ACME_STS.sts_token)
    before = len(site.oss.calls(ACME_STS.key_id))
    async with site.client("127.0.0.3") as client:
        responses = await burst(client, "acme", [oss_form(wrong)] * GUESSES)
    reached = len(site.oss.calls(ACME_STS.key_id)) - before
    assert_throttled(responses, reached, LIMIT)


async def test_parallel_guesses_for_many_users_from_one_address(site: AuthSite) -> None:
    async with site.client("127.0.0.4") as client:
        forms = [local_form(f"user{n}", "wrong") for n in range(GUESSES)]
        responses = await burst(client, "school", forms)
    assert_throttled(responses, statuses(responses)[401], PER_IP)


async def test_another_address_is_not_locked_out(site: AuthSite) -> None:
    async with site.client("127.0.0.5") as client:
        response = await log_in(client, "school", local_form("bob", TEST_PASSWORD))
    assert response.status_code == 200, response.text
