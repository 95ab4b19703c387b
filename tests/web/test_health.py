"""/healthz, /readyz and /metrics, in process."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from fastapi.testclient import TestClient

from qwen_ui import __version__
from qwen_ui.server import create_app
from qwen_ui.services import services_of
from qwen_ui.settings import Settings
from tests.support.auth import log_in


def test_healthz_reports_idle_engine(client: TestClient, settings: Settings) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "version": __version__,
        "model": settings.model_id,
        "revision": settings.model_revision,
        "engine": "idle",
        "models": [
            {
                "model": f"{settings.model_id}@{settings.model_revision}",
                "state": "not_loaded",
                "default": True,
                "in_flight": 0,
            }
        ],
    }


def test_healthz_503_only_when_engine_failed(client: TestClient) -> None:
    status = services_of(client.app).status
    status.loading()
    assert client.get("/healthz").status_code == 200
    status.failed("model not installed")
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["engine"] == "failed"
    assert response.json()["reason"] == "model not installed"
    status.ready()
    assert client.get("/healthz").status_code == 200


def test_healthz_does_not_touch_redis(home) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import free_port

    app = create_app(Settings(home=home, redis_url=f"redis://127.0.0.1:{free_port()}/0"))
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200


def test_readyz_needs_loaded_model_that_answered(client: TestClient) -> None:
    status = services_of(client.app).status
    response = client.get("/readyz")
    assert response.status_code == 503
    assert "not loaded" in response.json()["reason"]
    assert response.json()["ready"] is False
    assert response.json()["reasons"] == ["engine: " + status.not_ready_reason()]
    status.ready()
    assert client.get("/readyz").status_code == 503
    status.record_answer()
    assert client.get("/readyz").json() == {"ready": True, "status": "ready", "engine": "ready"}


def test_metrics_exposes_routes_and_engine_state(client: TestClient) -> None:
    client.get("/healthz")
    client.get("/healthz")
    text = client.get("/metrics").text
    assert 'qwen_ui_http_requests_total{method="GET",route="/healthz",status="200"} 2.0' in text
    assert 'qwen_ui_http_request_duration_seconds_count{method="GET",route="/healthz"} 2.0' in text
    assert 'qwen_ui_engine_state{state="idle"} 1.0' in text


def test_metrics_unmatched_paths_share_one_label(client: TestClient) -> None:
    for path in ("/nope-1", "/nope-2"):
        client.get(path)
    text = client.get("/metrics").text
    assert "/nope-1" not in text


def test_metrics_token(home) -> None:  # type: ignore[no-untyped-def]
    app = create_app(Settings(home=home, metrics_token="s3cret-token"))
    with TestClient(app) as client:
        denied = client.get("/metrics")
        assert denied.status_code == 401
        assert denied.json()["error"]["code"] == "unauthorized"
        assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
        ok = client.get("/metrics", headers={"Authorization": "Bearer s3cret-token"})
        assert ok.status_code == 200
        assert ok.headers["content-type"].startswith("text/plain")


def test_error_messages_follow_accept_language(home) -> None:  # type: ignore[no-untyped-def]
    app = create_app(Settings(home=home, metrics_token="t"))
    with TestClient(app) as client:
        body = client.get("/metrics", headers={"Accept-Language": "zh-CN,zh;q=0.9"}).json()
        assert body["error"]["message"] == "请先登录。"


def test_unknown_route_uses_the_one_error_shape(home) -> None:  # type: ignore[no-untyped-def]
    with TestClient(create_app(Settings(home=home, ui_path="/ui"))) as client:
        assert client.get("/no-such-page").json()["error"]["code"] == "unauthorized"
        log_in(client)  # anonymous callers learn nothing of the routes (web/guard.py)
        response = client.get("/no-such-page")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"


def test_readyz_names_an_unreachable_redis(home) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import free_port

    settings = Settings(home=home, redis_url=f"redis://127.0.0.1:{free_port()}/0")
    with TestClient(create_app(settings)) as client:
        status = services_of(client.app).status
        status.ready()
        status.record_answer()
        response = client.get("/readyz")
        assert response.status_code == 503
        assert response.json()["reasons"] == ["state: redis unreachable"]


def test_readyz_is_bounded_when_redis_hangs(  # type: ignore[no-untyped-def]
    home, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Redis that accepts the connection and never answers: /readyz still answers, by
    its own bound (the client's socket timeout is made ten minutes, so without the bound the
    request would wait that long; the thread's join is a hang guard, not a speed check)."""
    import socket
    import threading

    from qwen_ui import state as state_module

    silent = socket.create_server(("127.0.0.1", 0))  # accepts connections, never answers
    port = silent.getsockname()[1]
    slow = functools.partialmethod(state_module.RedisState.__init__, timeout_s=600.0)
    monkeypatch.setattr(state_module.RedisState, "__init__", slow)
    settings = Settings(home=home, redis_url=f"redis://127.0.0.1:{port}/0", readiness_timeout_s=0.3)
    answers: list[Any] = []
    try:
        with TestClient(create_app(settings)) as client:
            assert client.get("/healthz").status_code == 200
            asking = threading.Thread(target=lambda: answers.append(client.get("/readyz")))
            asking.start()
            asking.join(120)
            assert answers, "/readyz waited on the silent Redis"
            assert answers[0].status_code == 503
            assert "state: redis unreachable" in answers[0].json()["reasons"]
    finally:
        silent.close()
