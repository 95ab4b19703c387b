"""Hole 4 of issue 26: no cross-origin access unless configured, whatever Gradio does by
itself; replayed with a real host name behind the proxy headers."""

from __future__ import annotations

import pytest

from tests.security.conftest import Site

pytestmark = pytest.mark.e2e

EVIL = "https://evil.example"
PROXIED = {"Host": "qwen.example.com", "X-Forwarded-Proto": "https", "Origin": EVIL}
PATHS = [
    ("GET", "/config"),
    ("GET", "/gradio_api/info"),
    ("GET", "/gradio_api/openapi.json"),
    ("POST", "/gradio_api/upload"),
    ("POST", "/api/v1/ask"),
    ("GET", "/healthz"),
]


def _no_cors(headers: dict[str, str]) -> None:
    lowered = {k.lower(): v for k, v in headers.items()}
    assert "access-control-allow-origin" not in lowered, lowered
    assert lowered.get("access-control-allow-credentials") != "true", lowered


@pytest.mark.parametrize(("method", "path"), PATHS)
def test_no_origin_is_echoed_to_a_logged_in_user(memory_site: Site, method: str, path: str) -> None:
    user = memory_site.user()
    cookie = memory_site.session_cookie(user)
    with memory_site.anonymous() as client:
        response = client.request(method, path, headers={**PROXIED, "Cookie": cookie})
        _no_cors(dict(response.headers))


@pytest.mark.parametrize(("method", "path"), [*PATHS, ("GET", "/gradio_api/file=x.png")])
def test_preflight_allows_no_foreign_origin(memory_site: Site, method: str, path: str) -> None:
    headers = {
        **PROXIED,
        "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": "content-type",
    }
    with memory_site.anonymous() as client:
        response = client.options(path, headers=headers)
    _no_cors(dict(response.headers))
    assert response.status_code in (400, 401, 403)
