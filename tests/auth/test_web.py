"""Cookies, sessions over HTTP, the login redirect, Gradio's hook, logout, STS expiry."""

from __future__ import annotations

from http.cookies import SimpleCookie
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from qwen_ui.auth.principal import Principal
from qwen_ui.errors import Unauthorized
from qwen_ui.server import create_app
from qwen_ui.services import services_of
from qwen_ui.settings import Settings
from qwen_ui.web.auth import principal_from_gradio, safe_next
from tests.auth.conftest import (
    ACME,
    ACME_STS,
    CSRF_RE,
    SecretWatch,
    local_fields,
    oss_fields,
    session_cookie,
    submit,
)
from tests.support.oss_server import FakeOSS


def set_cookie_header(response_headers: list[str], name: str) -> SimpleCookie:
    for header in response_headers:
        if header.startswith(name + "="):
            cookie: SimpleCookie = SimpleCookie()
            cookie.load(header)
            return cookie
    raise AssertionError(f"no Set-Cookie for {name}: {response_headers}")


def test_cookie_over_http(web: TestClient, secret_watch: SecretWatch) -> None:
    response = submit(web, "school", local_fields("alice"))
    cookie = set_cookie_header(response.headers.get_list("set-cookie"), "qwen_session")[
        "qwen_session"
    ]
    secret_watch.add(cookie.value)
    assert len(cookie.value) == 43  # 256 bits, url-safe base64
    assert cookie["httponly"] and cookie["samesite"] == "lax" and cookie["path"] == "/"
    assert not cookie["secure"]


def _assert_secure(response_headers: list[str]) -> str:
    cookie = set_cookie_header(response_headers, "__Host-qwen_session")["__Host-qwen_session"]
    assert cookie["secure"] and cookie["httponly"] and cookie["samesite"] == "lax"
    assert cookie["path"] == "/" and not cookie["domain"]
    return cookie.value


def test_cookie_over_https(auth_settings: Settings, secret_watch: SecretWatch) -> None:
    with TestClient(
        create_app(auth_settings), base_url="https://testserver", follow_redirects=False
    ) as client:
        response = submit(client, "school", local_fields("alice"))
        secret_watch.add(_assert_secure(response.headers.get_list("set-cookie")))
        assert client.get("/api/v1/me").status_code == 200


def test_cookie_secure_behind_trusted_proxy(
    auth_settings: Settings, secret_watch: SecretWatch
) -> None:
    """X-Forwarded-Proto from 127.0.0.1 (the default trusted proxy) makes the request https."""
    app = create_app(auth_settings)
    with TestClient(app, client=("127.0.0.1", 40000), follow_redirects=False) as client:
        client.headers["X-Forwarded-Proto"] = "https"
        page = client.get("/login")
        nonce = set_cookie_header(page.headers.get_list("set-cookie"), "__Host-qwen_csrf")
        assert nonce["__Host-qwen_csrf"]["secure"]
        # the test client talks plain http, so it would not send a Secure cookie back
        # by itself; the browser behind the TLS proxy would
        csrf = CSRF_RE.search(page.text).group(1)  # type: ignore[union-attr]
        response = client.post(
            "/login",
            data={"csrf": csrf, "tenant": "school", **local_fields("alice")},
            headers={"Cookie": f"__Host-qwen_csrf={nonce['__Host-qwen_csrf'].value}"},
        )
        secret_watch.add(_assert_secure(response.headers.get_list("set-cookie")))


def test_untrusted_peer_cannot_claim_https(
    auth_settings: Settings, secret_watch: SecretWatch
) -> None:
    with TestClient(
        create_app(auth_settings), client=("10.9.9.9", 1), follow_redirects=False
    ) as client:
        client.headers["X-Forwarded-Proto"] = "https"
        response = submit(client, "school", local_fields("alice"))
        secret_watch.add(session_cookie(client))
        assert "qwen_session=" in response.headers["set-cookie"]
        assert "__Host-" not in response.headers["set-cookie"]


def test_browser_without_session_is_sent_to_login(web: TestClient) -> None:
    page = web.get("/?lang=zh", headers={"Accept": "text/html,application/xhtml+xml"})
    assert page.status_code == 303
    assert page.headers["location"] == "/login?next=/%3Flang%3Dzh"
    api = web.get("/config", headers={"Accept": "application/json"})
    assert api.status_code == 401
    assert web.get("/api/v1/me").json()["error"]["code"] == "unauthorized"
    for public in ("/healthz", "/login", "/metrics"):
        assert web.get(public, headers={"Accept": "text/html"}).status_code == 200, public


def test_logged_in_browser_gets_the_ui(web: TestClient, secret_watch: SecretWatch) -> None:
    submit(web, "acme", oss_fields(ACME))
    secret_watch.add(session_cookie(web))
    page = web.get("/", headers={"Accept": "text/html"})
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert web.get("/config").status_code == 200
    assert web.get("/gradio_api/user").json() == f"acme/{ACME.key_id}"


def test_idle_timeout(web: TestClient, auth_settings: Settings, secret_watch: SecretWatch) -> None:
    submit(web, "school", local_fields("alice"))
    secret_watch.add(session_cookie(web))
    clock = services_of(web.app).auth.clock
    for _ in range(3):  # use keeps it alive past one idle period
        clock.advance(auth_settings.session_idle_s * 0.6)
        assert web.get("/api/v1/me").status_code == 200
    clock.advance(auth_settings.session_idle_s + 1)
    assert web.get("/api/v1/me").status_code == 401


def test_absolute_lifetime(
    web: TestClient, auth_settings: Settings, secret_watch: SecretWatch
) -> None:
    submit(web, "school", local_fields("alice"))
    secret_watch.add(session_cookie(web))
    clock = services_of(web.app).auth.clock
    step = auth_settings.session_idle_s * 0.5
    elapsed = 0.0
    while elapsed + step < auth_settings.session_lifetime_s:
        clock.advance(step)
        elapsed += step
        assert web.get("/api/v1/me").status_code == 200
    clock.advance(step)
    assert web.get("/api/v1/me").status_code == 401


def test_logout_deletes_the_session_server_side(web: TestClient, secret_watch: SecretWatch) -> None:
    submit(web, "school", local_fields("alice"))
    session_id = session_cookie(web)
    secret_watch.add(session_id)
    me = web.get("/api/v1/me").json()
    confirm = web.get("/logout")
    assert confirm.status_code == 200
    assert '<a class="cancel" href="/">Cancel</a>' in confirm.text  # back to the chat
    assert '<a class="cancel" href="/">取消</a>' in web.get("/logout?lang=zh").text
    bad = web.post("/logout", data={"csrf": "forged"})
    assert bad.status_code == 403
    out = web.post("/logout", data={"csrf": me["logout_csrf"]})
    assert out.status_code == 303 and out.headers["location"] == "/login?logged_out=1"
    assert session_cookie(web) is None
    auth = services_of(web.app).auth
    assert web.portal.call(auth.sessions.load, session_id) is None  # type: ignore[union-attr]
    web.cookies.set("qwen_session", session_id or "")  # replaying the old cookie fails
    assert web.get("/api/v1/me").status_code == 401


def test_sts_expiry_ends_the_session(
    web: TestClient, oss: FakeOSS, auth_settings: Settings, secret_watch: SecretWatch
) -> None:
    assert submit(web, "acme", oss_fields(ACME_STS)).status_code == 303
    secret_watch.add(session_cookie(web))
    clock = services_of(web.app).auth.clock
    clock.advance(auth_settings.sts_recheck_s + 1)
    assert web.get("/api/v1/me").status_code == 200  # re-checked, still valid
    oss.keys[ACME_STS.key_id].expires_at = oss.now() - 1
    clock.advance(auth_settings.sts_recheck_s + 1)
    assert web.get("/api/v1/me").status_code == 401
    assert oss.calls(ACME_STS.key_id)[-1].code == "SecurityTokenExpired"
    assert web.get("/", headers={"Accept": "text/html"}).status_code == 303


def test_sts_session_survives_an_oss_outage(
    web: TestClient, oss: FakeOSS, auth_settings: Settings, secret_watch: SecretWatch
) -> None:
    submit(web, "acme", oss_fields(ACME_STS))
    secret_watch.add(session_cookie(web))
    oss.stop()
    services_of(web.app).auth.clock.advance(auth_settings.sts_recheck_s + 1)
    assert web.get("/api/v1/me").status_code == 200


def test_removed_user_loses_the_session(
    web: TestClient, auth_settings: Settings, secret_watch: SecretWatch
) -> None:
    from qwen_ui.auth import tenants as tenants_file

    submit(web, "school", local_fields("bob"))
    secret_watch.add(session_cookie(web))
    current = tenants_file.load(auth_settings.tenants_path, allow_insecure=True)
    school = current.tenants["school"]
    school = school.model_copy(update={"users": {"alice": school.users["alice"]}})
    tenants_file.save(auth_settings.tenants_path, tenants_file.with_tenant(current, school))
    assert web.get("/api/v1/me").status_code == 401


def test_principal_from_gradio() -> None:
    class FakeRequest:
        username = "acme/LTAIacmeReader000001"

    assert principal_from_gradio(FakeRequest()) == Principal(
        "acme", "LTAIacmeReader000001", "session"
    )
    FakeRequest.username = None  # type: ignore[assignment]
    with pytest.raises(Unauthorized):
        principal_from_gradio(FakeRequest())


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("/", "/"),
        ("/ui?x=1", "/ui?x=1"),
        ("//evil", "/"),
        ("/\\evil", "/"),
        ("http://x", "/"),
        ("", "/"),
        (None, "/"),
        ("/a\nb", "/"),
    ],
)
def test_safe_next(value: str | None, expected: str) -> None:
    assert safe_next(value, "/") == expected


def test_known_sts_expiration_caps_the_session(
    web: TestClient, auth_settings: Settings, secret_watch: SecretWatch
) -> None:
    from datetime import UTC, datetime

    clock = services_of(web.app).auth.clock
    soon = datetime.fromtimestamp(clock() + 120, UTC).isoformat().replace("+00:00", "Z")
    response = submit(web, "acme", oss_fields(ACME_STS), sts_expiration=soon)
    assert response.status_code == 303
    secret_watch.add(session_cookie(web))
    assert web.get("/api/v1/me").status_code == 200
    clock.advance(121)  # before any idle timeout or STS re-check would end it
    assert web.get("/api/v1/me").status_code == 401


def test_bad_or_past_sts_expiration(web: TestClient) -> None:
    assert submit(web, "acme", oss_fields(ACME_STS), sts_expiration="tomorrow").status_code == 400
    past = "2001-01-01T00:00:00Z"
    assert submit(web, "acme", oss_fields(ACME_STS), sts_expiration=past).status_code == 401
    assert session_cookie(web) is None


@pytest.mark.redis
def test_replicas_share_sessions_through_redis(
    home: Path, oss: FakeOSS, redis_server: object, secret_watch: SecretWatch
) -> None:
    """Two replicas with one Redis and one server key: a login on one works on the other,
    and its OSS secret can be opened there."""
    from cryptography.fernet import Fernet
    from pydantic import SecretStr

    from tests.auth.conftest import write_world

    url = redis_server.url  # type: ignore[attr-defined]
    key = SecretStr(Fernet.generate_key().decode())
    settings = Settings(home=home, redis_url=url, secret_key=key, allow_insecure_oss_endpoints=True)
    write_world(settings.tenants_path, oss.endpoint)
    with (
        TestClient(create_app(settings), follow_redirects=False) as one,
        TestClient(create_app(settings), follow_redirects=False) as two,
    ):
        assert submit(one, "acme", oss_fields(ACME)).status_code == 303
        session_id = session_cookie(one) or ""
        secret_watch.add(session_id)
        two.cookies.set("qwen_session", session_id)
        assert two.get("/api/v1/me").json()["tenant"] == "acme"
        got = two.get("/api/v1/oss/object", params={"key": "acme/cat.png"})
        assert got.status_code == 200
