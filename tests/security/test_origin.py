"""Hole 5 of issue 26: a cookie session cannot be used cross-site on the API or on
Gradio's own routes; bearer tokens are unaffected."""

from __future__ import annotations

import pytest

from tests.security.conftest import Site

pytestmark = pytest.mark.e2e

EVIL = "https://evil.example"
# max_new_tokens=0 is refused by the option checks: whoever gets that far passed the guard.
FORM = {"question": "What shape?", "max_new_tokens": "0"}


def _code(response: object) -> str:
    return str(response.json()["error"]["code"])  # type: ignore[attr-defined]


def test_cross_site_post_with_the_cookie_is_refused(site: Site) -> None:
    user = site.user()
    response = user.post("/api/v1/ask", data=FORM, headers={"Origin": EVIL})
    assert response.status_code == 403
    assert _code(response) == "csrf_failed"


def test_gradio_routes_refuse_cross_site_posts(site: Site) -> None:
    user = site.user()
    for path in ("/gradio_api/queue/join", "/gradio_api/cancel", "/gradio_api/upload"):
        response = user.post(path, json={}, headers={"Origin": EVIL})
        assert response.status_code == 403, path


def test_post_without_origin_or_referer_is_refused(site: Site) -> None:
    user = site.user()
    del user.headers["origin"]
    response = user.post("/api/v1/ask", data=FORM)
    assert response.status_code == 403


def test_same_site_origin_referer_or_csrf_header_pass(site: Site) -> None:
    user = site.user()
    assert _code(user.post("/api/v1/ask", data=FORM)) == "bad_option"  # Origin: the site
    del user.headers["origin"]
    referer = {"Referer": site.url + "/"}
    assert _code(user.post("/api/v1/ask", data=FORM, headers=referer)) == "bad_option"
    token = user.get("/api/v1/me").json()["logout_csrf"]
    with_token = {"X-CSRF-Token": token, "Origin": EVIL}
    assert _code(user.post("/api/v1/ask", data=FORM, headers=with_token)) == "bad_option"
    wrong_token = {"X-CSRF-Token": token[:-2] + "xx", "Origin": EVIL}
    assert user.post("/api/v1/ask", data=FORM, headers=wrong_token).status_code == 403


def test_bearer_token_is_not_origin_checked(site: Site) -> None:
    with site.anonymous() as client:
        headers = {"Authorization": f"Bearer {site.token}", "Origin": EVIL}
        response = client.post("/api/v1/ask", data=FORM, headers=headers)
    assert _code(response) == "bad_option"
