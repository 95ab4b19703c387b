"""Hole 9 of issue 26: anonymous clients reach only the health, readiness and metrics
probes and the login page; Gradio's internal routes are behind login too."""

from __future__ import annotations

import pytest

from tests.security.conftest import Site

pytestmark = pytest.mark.e2e

GUARDED = [
    ("GET", "/gradio_api/heartbeat/any-session"),
    ("POST", "/gradio_api/cancel"),
    ("POST", "/gradio_api/reset"),
    ("GET", "/gradio_api/openapi.json"),
    ("GET", "/openapi.json"),
    ("GET", "/config"),
    ("GET", "/gradio_api/info"),
    ("POST", "/gradio_api/upload"),
    ("GET", "/gradio_api/file=/etc/hostname"),
    ("POST", "/gradio_api/queue/join"),
    ("GET", "/gradio_api/queue/data?session_hash=x"),
    ("GET", "/theme.css"),
    ("POST", "/api/v1/ask"),
    ("GET", "/api/v1/oss/objects"),
]


@pytest.mark.parametrize(("method", "path"), GUARDED)
def test_anonymous_api_clients_get_401(site: Site, method: str, path: str) -> None:
    with site.anonymous() as client, client.stream(method, path) as response:
        # streamed: before the fix, the heartbeat answered 200 and never ended
        assert response.status_code == 401, (path, response.status_code)
        response.read()
        assert response.json()["error"]["code"] == "unauthorized"


def test_anonymous_browsers_are_sent_to_login(site: Site) -> None:
    with site.anonymous() as client:
        for path in ("/", "/config", "/gradio_api/openapi.json"):
            response = client.get(path, headers={"Accept": "text/html"})
            assert response.status_code == 303, path
            assert response.headers["location"].startswith("/login?next=")


def test_public_paths_answer_without_login(site: Site) -> None:
    with site.anonymous() as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code in (200, 503)
        assert client.get("/metrics").status_code == 200  # no metrics token configured
        assert client.get("/login").status_code == 200


def test_a_logged_in_user_reaches_gradio(site: Site) -> None:
    user = site.user()
    assert user.get("/config").status_code == 200
    assert user.get("/gradio_api/info").status_code == 200
