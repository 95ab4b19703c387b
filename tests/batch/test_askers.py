"""The server asker against a scripted HTTP transport: the answer from the NDJSON stream,
errors in the API's shape, busy answers retried, a dead server as a row error."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from qwen_ui.batch.askers import ServerAsker, ServerOptions
from qwen_ui.batch.errors import ServerRefusedToken, ServerUnreachable

Handler = Callable[[httpx.Request], httpx.Response]


def asker(handler: Handler, retries: int = 2) -> ServerAsker:
    options = ServerOptions("http://server.test", "qwu_secret", retries=retries)
    client = httpx.AsyncClient(
        base_url=options.url,
        headers={"Authorization": f"Bearer {options.token}"},
        transport=httpx.MockTransport(handler),
    )
    return ServerAsker(options, client)


def ndjson(*events: dict[str, object]) -> httpx.Response:
    body = "".join(json.dumps(e) + "\n" for e in events)
    return httpx.Response(200, text=body, headers={"content-type": "application/x-ndjson"})


def error(status: int, code: str, retry_after: float | None = None) -> httpx.Response:
    body: dict[str, object] = {"code": code, "message": code, "status": status}
    if retry_after is not None:
        body["retry_after"] = retry_after
    return httpx.Response(status, json={"error": body})


DONE: dict[str, object] = {
    "type": "done",
    "answer": '[{"bbox_2d": [1, 2, 3, 4], "label": "star"}]',
    "answer_text": "star",
    "boxes": [{"image": 1, "label": "star", "box": [1, 2, 3, 4]}],
    "timings": {"total": 0.2},
}


async def test_the_done_line_becomes_the_answer() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return ndjson({"type": "stage", "stage": "decoding"}, {"type": "token", "text": "x"}, DONE)

    answered = await asker(handler).ask("Where?", [b"png-bytes"])
    assert answered.answer == "star" and answered.error is None
    assert answered.boxes == DONE["boxes"] and answered.timings == {"total": 0.2}
    request = seen[0]
    assert request.url.path == "/api/v1/ask"
    assert request.headers["authorization"] == "Bearer qwu_secret"
    assert b'name="question"' in request.content and b"png-bytes" in request.content


async def test_a_failed_line_and_an_error_response_are_row_errors() -> None:
    failed = {"type": "failed", "code": "answer_failed", "message": "m", "status": 500}
    answered = await asker(lambda r: ndjson({"type": "stage"}, failed)).ask("Q", [])
    assert answered.error == {"code": "answer_failed", "message": "m", "status": 500}
    answered = await asker(lambda r: error(400, "no_question")).ask(" ", [])
    assert answered.error is not None and answered.error["code"] == "no_question"
    answered = await asker(lambda r: httpx.Response(502, text="<html>bad gateway")).ask("Q", [])
    assert answered.error == {"code": "http_error", "message": "HTTP 502", "status": 502}


async def test_busy_answers_are_retried_after_retry_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr("qwen_ui.batch.askers.asyncio.sleep", sleep)
    replies = iter([error(503, "queue_full", 2.5), error(429, "quota", 999), ndjson(DONE)])
    answered = await asker(lambda r: next(replies)).ask("Q", [])
    assert answered.answer == "star" and waits == [2.5, 30.0]  # the wait is capped
    always_busy = await asker(lambda r: error(503, "queue_full", 1), retries=1).ask("Q", [])
    assert always_busy.error is not None and always_busy.error["code"] == "queue_full"


async def test_a_dead_server_is_a_row_error_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    async def sleep(seconds: float) -> None:
        return None

    monkeypatch.setattr("qwen_ui.batch.askers.asyncio.sleep", sleep)

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    answered = await asker(handler).ask("Q", [])
    assert answered.error is not None and answered.error["code"] == ServerUnreachable.code
    assert "qwu_secret" not in json.dumps(answered.error)


async def test_check_token_says_who_the_token_is() -> None:
    with pytest.raises(ServerRefusedToken):
        await asker(lambda r: error(401, "unauthorized")).check_token()
    me = {"tenant": "acme", "oss": {"bucket": "b"}}
    assert await asker(lambda r: httpx.Response(200, json=me)).check_token() == me
    # not a qwen-ui server: stop before any row rather than fail every row
    for answer in (httpx.Response(404, text="no"), httpx.Response(200, text="<html>")):
        with pytest.raises(ServerUnreachable, match="/api/v1/me"):
            await asker(lambda r, answer=answer: answer).check_token()
