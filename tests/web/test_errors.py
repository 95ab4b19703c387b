"""The one error shape from the one builder: typed errors, engine failures and the login
redirect's store failure all answer ``{"error": {code, message, status[, retry_after]}}``."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from qwen_ui.engine.events import Failed
from qwen_ui.errors import TooManyRequests
from qwen_ui.web.errors import failure_response


def test_engine_failures_and_typed_errors_share_one_shape() -> None:
    error = TooManyRequests(retry_after=2.26, seconds=3)
    failed = Failed.of(error, "zh")
    response = failure_response(failed.code, failed.message, failed.status, failed.retry_after)
    assert response.status_code == 429 and response.headers["retry-after"] == "2"
    assert json.loads(response.body) == error.to_dict("zh")
    assert json.loads(response.body)["error"]["retry_after"] == 2.3


def test_no_retry_after_without_a_wait() -> None:
    response = failure_response("bad_request", "The request is not valid.", 400)
    assert "retry-after" not in response.headers
    assert json.loads(response.body) == {
        "error": {"code": "bad_request", "message": "The request is not valid.", "status": 400}
    }


def test_errors_follow_the_browser_language(anonymous_client: TestClient) -> None:
    response = anonymous_client.get("/api/v1/me", headers={"accept-language": "zh-CN"})
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "请先登录。"
