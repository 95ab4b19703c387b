"""The guards that held in the review, re-checked against the real process: CSRF on the
login form, session fixation, path traversal through ``file=``."""

from __future__ import annotations

import re

import pytest

from qwen_ui.web.auth import SESSION_COOKIE
from tests.security.conftest import Site
from tests.support.auth import TEST_PASSWORD
from tests.support.server import HIDDEN

pytestmark = pytest.mark.e2e


def test_login_form_needs_its_csrf_field(site: Site) -> None:
    with site.anonymous() as client:
        client.get("/login")
        form = {"tenant": "demo", "method": "local", "user": "demo", "password": TEST_PASSWORD}
        response = client.post("/login", data=form, headers={"Origin": site.url})
        assert response.status_code == 403
        assert SESSION_COOKIE not in client.cookies


def test_login_from_another_site_is_refused(site: Site) -> None:
    with site.anonymous() as client:
        fields = dict(HIDDEN.findall(client.get("/login").text))
        form = {**fields, "tenant": "demo", "method": "local", "user": "demo"}
        form["password"] = TEST_PASSWORD
        response = client.post("/login", data=form, headers={"Origin": "https://evil.example"})
        assert response.status_code == 403


def test_a_planted_session_id_is_not_adopted(site: Site) -> None:
    with site.anonymous() as client:
        client.cookies.set(SESSION_COOKIE, "planted-by-an-attacker", domain="127.0.0.1")
        fields = dict(HIDDEN.findall(client.get("/login").text))
        form = {**fields, "tenant": "demo", "method": "local", "user": "demo"}
        form["password"] = TEST_PASSWORD
        client.post("/login", data=form, headers={"Origin": site.url})
        assert client.cookies.get(SESSION_COOKIE) not in (None, "planted-by-an-attacker")
    with site.anonymous() as planted:
        planted.cookies.set(SESSION_COOKIE, "planted-by-an-attacker")
        assert planted.get("/api/v1/me").status_code == 401


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "../../../../etc/passwd",
        "%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/proc/self/environ",
    ],
)
def test_file_route_does_not_traverse(memory_site: Site, path: str) -> None:
    user = memory_site.user()
    response = user.get(f"/gradio_api/file={path}")
    assert response.status_code in (403, 404), (path, response.status_code)
    assert not re.search(r"root:|QWEN_UI_", response.text)
