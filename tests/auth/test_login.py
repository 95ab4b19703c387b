"""Logging in through the real form (both state backends), against our OSS server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from qwen_ui.server import create_app
from qwen_ui.services import services_of
from qwen_ui.settings import Settings
from tests.auth.conftest import (
    ACME,
    ACME_NO_RIGHTS,
    ACME_STS,
    ACME_UNLISTED,
    BETA,
    Keys,
    SecretWatch,
    error_of,
    local_fields,
    oss_fields,
    session_cookie,
    submit,
    write_world,
)
from tests.conftest import free_port
from tests.support.oss_server import FakeOSS

GENERIC_EN = "The tenant or credentials are not valid."


def audit_lines(home: Path) -> list[dict[str, object]]:
    path = home / "logs" / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("keys", [ACME, ACME_STS], ids=["accesskey", "sts"])
def test_right_oss_keys_log_in(web: TestClient, keys: Keys, secret_watch: SecretWatch) -> None:
    response = submit(web, "acme", oss_fields(keys))
    assert response.status_code == 303
    assert response.headers["location"] == "/"
    secret_watch.add(session_cookie(web))
    me = web.get("/api/v1/me").json()
    assert (me["tenant"], me["user"], me["method"]) == ("acme", keys.key_id, "oss")


def test_right_password_logs_in(web: TestClient, home: Path, secret_watch: SecretWatch) -> None:
    response = submit(web, "school", local_fields("alice"))
    assert response.status_code == 303
    secret_watch.add(session_cookie(web))
    assert web.get("/api/v1/me").json()["user"] == "alice"
    assert audit_lines(home)[-1] | {"time": 0, "ms": 0, "request_id": ""} == {
        "time": 0,
        "event": "login",
        "tenant": "school",
        "user": "alice",
        "method": "password",
        "outcome": "ok",
        "ip": "testclient",
        "ms": 0,
        "request_id": "",
    }


WRONG = {
    "unknown key": ("acme", oss_fields(Keys("LTAIunknownKey000001", ACME.secret))),
    "wrong secret": ("acme", oss_fields(Keys(ACME.key_id, "not-the-secret-xxxxxxxxxxxxxx"))),
    "bad sts token": ("acme", oss_fields(Keys(ACME_STS.key_id, ACME_STS.secret, "forged"))),
    "sts key without token": ("acme", oss_fields(Keys(ACME_STS.key_id, ACME_STS.secret))),
    "key without rights": ("acme", oss_fields(ACME_NO_RIGHTS)),
    "key not allowed for tenant": ("acme", oss_fields(ACME_UNLISTED)),
    "other tenant's key": ("acme", oss_fields(BETA)),
    "unknown tenant": ("nosuch", oss_fields(ACME)),
    "wrong password": ("school", local_fields("alice", "wrong-password")),
    "unknown user": ("school", local_fields("mallory")),
    "password for an oss tenant": ("acme", local_fields("alice")),
    "keys for a local tenant": ("school", oss_fields(ACME)),
    "empty form": ("acme", {"method": "oss"}),
}


def test_every_wrong_case_gets_the_same_answer(web: TestClient, oss: FakeOSS) -> None:
    answers = set()
    clock = services_of(web.app).auth.clock
    for name, (tenant, fields) in WRONG.items():
        clock.advance(3600)  # past any back-off: this test is about the answers
        response = submit(web, tenant, fields, lang="en")
        assert response.status_code == 401, name
        assert session_cookie(web) is None, name
        answers.add((response.status_code, error_of(response)))
        clock.advance(3600)
        json_answer = web.post(
            "/login",
            data={**fields, "tenant": tenant, "csrf": _csrf(web)},
            headers={"Accept": "application/json"},
        )
        answers.add((json_answer.status_code, json_answer.json()["error"]["message"]))
    assert answers == {(401, GENERIC_EN)}
    assert not oss.calls(ACME_UNLISTED.key_id), "a key the tenant does not allow reached OSS"


def _csrf(client: TestClient) -> str:
    from tests.auth.conftest import csrf_of

    return csrf_of(client)


def test_wrong_answer_in_chinese(web: TestClient) -> None:
    response = submit(web, "acme", oss_fields(ACME_NO_RIGHTS), lang="zh")
    assert error_of(response) == "租户或凭证无效。"


def test_oss_down_is_503_and_no_failure(
    auth_settings: Settings, home: Path, oss: FakeOSS, secret_watch: SecretWatch
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    write_world(auth_settings.tenants_path, closed)
    with TestClient(create_app(auth_settings), follow_redirects=False) as client:
        for _ in range(auth_settings.login_max_failures + 2):
            response = submit(client, "acme", oss_fields(ACME))
            assert response.status_code == 503
            assert error_of(response) == "Cannot reach OSS, try again."
        assert set(line["outcome"] for line in audit_lines(home)) == {"oss_unavailable"}
        write_world(auth_settings.tenants_path, oss.endpoint)  # OSS is back
        assert submit(client, "acme", oss_fields(ACME)).status_code == 303  # not throttled
        secret_watch.add(session_cookie(client))


def test_throttle_engages_then_releases(web: TestClient, auth_settings: Settings) -> None:
    wrong = oss_fields(Keys(ACME.key_id, "wrong-secret-xxxxxxxxxxxxxxxxx"))
    for _ in range(auth_settings.login_max_failures):
        assert submit(web, "acme", wrong).status_code == 401
    throttled = submit(web, "acme", oss_fields(ACME))  # even the right key waits
    assert throttled.status_code == 429
    retry = int(throttled.headers["retry-after"])
    assert 1 <= retry <= auth_settings.login_backoff_s
    services_of(web.app).auth.clock.advance(retry + 1)
    assert submit(web, "acme", oss_fields(ACME)).status_code == 303


def test_back_off_grows(web: TestClient, auth_settings: Settings) -> None:
    wrong = local_fields("alice", "nope")
    waits = []
    for _ in range(auth_settings.login_max_failures + 2):
        response = submit(web, "school", wrong)
        if response.status_code == 429:
            waits.append(int(response.headers["retry-after"]))
            services_of(web.app).auth.clock.advance(waits[-1] + 1)
            response = submit(web, "school", wrong)
            assert response.status_code == 401
    response = submit(web, "school", wrong)
    assert response.status_code == 429
    waits.append(int(response.headers["retry-after"]))
    assert waits == sorted(waits) and waits[-1] > waits[0]


def test_throttle_is_checked_before_oss(
    web: TestClient, oss: FakeOSS, auth_settings: Settings
) -> None:
    wrong = oss_fields(Keys(ACME.key_id, "wrong-secret-xxxxxxxxxxxxxxxxx"))
    for _ in range(auth_settings.login_max_failures):
        submit(web, "acme", wrong)
    before = len(oss.calls(ACME.key_id))
    assert submit(web, "acme", wrong).status_code == 429
    assert len(oss.calls(ACME.key_id)) == before


def test_attacker_elsewhere_does_not_lock_out_the_user(auth_settings: Settings) -> None:
    """Behind a trusted proxy (the ALB), addresses come from X-Forwarded-For."""
    settings = auth_settings.model_copy(update={"forwarded_allow_ips": "testclient"})
    attacker = {"X-Forwarded-For": "203.0.113.7"}
    user = {"X-Forwarded-For": "198.51.100.2"}
    with TestClient(create_app(settings), follow_redirects=False) as client:
        for _ in range(settings.login_max_failures + 3):
            client.headers.update(attacker)
            submit(client, "school", local_fields("alice", "guess"))
        assert submit(client, "school", local_fields("alice")).status_code == 429
        client.headers.update(user)
        assert submit(client, "school", local_fields("alice")).status_code == 303


def test_csrf_is_required(web: TestClient) -> None:
    web.get("/login")
    response = web.post(
        "/login", data={"tenant": "school", **local_fields("alice"), "csrf": "forged"}
    )
    assert response.status_code == 403
    assert session_cookie(web) is None
    cross_site = submit(web, "school", local_fields("alice"))
    assert cross_site.status_code == 303  # same-origin post without Origin passes
    other = web.post(
        "/login",
        data={"tenant": "school", **local_fields("alice"), "csrf": _csrf(web)},
        headers={"Origin": "https://evil.example"},
    )
    assert other.status_code == 403


def test_next_stays_on_this_site(web: TestClient) -> None:
    for target, expected in [
        ("/?x=1", "/?x=1"),
        ("//evil.example/", "/"),
        ("https://evil.example", "/"),
    ]:
        web.cookies.clear()
        response = submit(web, "school", local_fields("alice"), next=target)
        assert response.headers["location"] == expected


def test_login_gives_a_new_session_id(web: TestClient, secret_watch: SecretWatch) -> None:
    submit(web, "school", local_fields("alice"))
    first = session_cookie(web)
    submit(web, "school", local_fields("bob"))
    second = session_cookie(web)
    secret_watch.add(first, second)
    assert first and second and first != second
    auth = services_of(web.app).auth
    assert web.portal.call(auth.sessions.load, first) is None  # type: ignore[union-attr]


def test_login_page_in_both_languages(web: TestClient) -> None:
    en = web.get("/login", headers={"Accept-Language": "en"})
    zh = web.get("/login", headers={"Accept-Language": "zh-CN,zh;q=0.9"})
    assert "AccessKey Secret" in en.text and "Log in" in en.text
    assert "登录" in zh.text and 'lang="zh-CN"' in zh.text
    assert "default-src 'none'" in en.headers["content-security-policy"]
    assert en.headers["cache-control"] == "no-store"
    assert "<script" not in en.text


def test_audit_records_failures_without_secrets(web: TestClient, home: Path) -> None:
    submit(web, "acme", oss_fields(Keys(ACME.key_id, "wrong-secret-xxxxxxxxxxxxxxxxx")))
    submit(web, "acme", oss_fields(Keys(ACME.secret, ACME.secret)))  # secret in the id field
    submit(web, "school", local_fields("correct-horse-battery-staple", "x"))
    lines = audit_lines(home)
    assert [line["outcome"] for line in lines] == ["invalid", "invalid", "invalid"]
    assert lines[0]["user"] == ACME.key_id
    assert lines[1]["user"] == "(unrecognised)"
    assert lines[2]["user"] == "(unknown)"


def test_state_store_down_is_503(home: Path, oss: FakeOSS) -> None:
    settings = Settings(
        home=home, redis_url=f"redis://127.0.0.1:{free_port()}/0", allow_insecure_oss_endpoints=True
    )
    write_world(settings.tenants_path, oss.endpoint)
    with TestClient(create_app(settings), follow_redirects=False) as client:
        response = submit(client, "school", local_fields("alice"))
        assert response.status_code == 503
        assert session_cookie(client) is None
        client.cookies.set("qwen_session", "s" * 43)
        assert client.get("/", headers={"Accept": "text/html"}).status_code == 503
        assert client.get("/api/v1/me").status_code == 503
        assert client.get("/config").status_code == 503
    assert audit_lines(home)[-1]["outcome"] == "state_unavailable"
