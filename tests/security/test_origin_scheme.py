"""Point 11 (first half) of issue 57: the same-site proof compares scheme, host and port.
``http://host`` is another origin than ``https://host``: a page served over plain HTTP
(on the same host name) cannot post with the session cookie of the HTTPS site, nor the
other way round. The site's own scheme is the request's: ``X-Forwarded-Proto`` counts
only from a trusted proxy (QWEN_UI_FORWARDED_ALLOW_IPS, 127.0.0.1 by default)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from tests.security.conftest import Site
from tests.support.auth import TEST_PASSWORD
from tests.support.server import HIDDEN

pytestmark = pytest.mark.e2e

# max_new_tokens=0 is refused by the option checks: whoever gets that far passed the guard.
FORM = {"question": "What shape?", "max_new_tokens": "0"}
HTTPS = {"X-Forwarded-Proto": "https"}  # as the TLS-terminating proxy on 127.0.0.1 says
COOKIE = re.compile(r"^([^=;]+)=([^;]*)")


def _code(response: httpx.Response) -> str:
    return str(response.json()["error"]["code"])


def _other_scheme(url: str) -> str:
    return url.replace("http://", "https://", 1)


def test_https_origin_is_refused_on_the_plain_http_site(memory_site: Site) -> None:
    user = memory_site.user()
    other = _other_scheme(memory_site.url)
    refused = user.post("/api/v1/ask", data=FORM, headers={"Origin": other})
    assert refused.status_code == 403 and _code(refused) == "csrf_failed"
    del user.headers["origin"]
    by_referer = user.post("/api/v1/ask", data=FORM, headers={"Referer": other + "/"})
    assert by_referer.status_code == 403 and _code(by_referer) == "csrf_failed"
    assert _code(user.post("/api/v1/ask", data=FORM, headers={"Origin": memory_site.url})) == (
        "bad_option"
    )


@pytest.fixture
def https_cookie(memory_site: Site) -> Iterator[str]:
    """A session made over HTTPS (behind the proxy): the ``__Host-`` Secure cookie, sent
    by hand (httpx keeps Secure cookies off plain-HTTP connections)."""
    with httpx.Client(base_url=memory_site.url, timeout=20) as client:
        page = client.get("/login", headers=HTTPS)
        jar = _cookies(page)
        form = dict(HIDDEN.findall(page.text))
        form |= {"tenant": "demo", "method": "local", "user": "demo", "password": TEST_PASSWORD}
        headers = {**HTTPS, "Origin": _other_scheme(memory_site.url), "Cookie": jar}
        done = client.post("/login", data=form, headers=headers)
        assert done.status_code == 303, done.text[:300]
        assert "error" not in done.headers.get("location", "")
        yield _cookies(done)


def _cookies(response: httpx.Response) -> str:
    pairs = [COOKIE.match(line) for line in response.headers.get_list("set-cookie")]
    return "; ".join(f"{m.group(1)}={m.group(2)}" for m in pairs if m and m.group(2))


def test_http_origin_is_refused_on_the_https_site(memory_site: Site, https_cookie: str) -> None:
    assert "__Host-" in https_cookie
    with httpx.Client(base_url=memory_site.url, timeout=20) as client:
        base = {**HTTPS, "Cookie": https_cookie}
        refused = client.post("/api/v1/ask", data=FORM, headers={**base, "Origin": memory_site.url})
        assert refused.status_code == 403 and _code(refused) == "csrf_failed"
        passed = client.post(
            "/api/v1/ask", data=FORM, headers={**base, "Origin": _other_scheme(memory_site.url)}
        )
        assert _code(passed) == "bad_option"


def test_login_form_posted_from_the_other_scheme_is_refused(memory_site: Site) -> None:
    with httpx.Client(base_url=memory_site.url, timeout=20) as client:
        page = client.get("/login")
        form = dict(HIDDEN.findall(page.text))
        form |= {"tenant": "demo", "method": "local", "user": "demo", "password": TEST_PASSWORD}
        headers = {"Origin": _other_scheme(memory_site.url), "Accept": "application/json"}
        response = client.post("/login", data=form, headers=headers)
        assert response.status_code == 403, response.text[:300]
        assert _code(response) == "csrf_failed"
