"""The suite's secret guard can fail, and it sees DEBUG lines of every library."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from qwen_ui.services import services_of
from tests.auth.conftest import (
    ACME,
    ACME_STS,
    captured_lines,
    find_leaks,
    oss_fields,
    session_cookie,
    submit,
)


def test_guard_finds_a_planted_secret(home: Path) -> None:
    record = logging.LogRecord(
        "x", logging.DEBUG, __file__, 1, "header %s", ("token=abc123",), None
    )
    assert find_leaks({"abc123"}, captured_lines([record], home)) == [
        "header token=abc123",
        "('token=abc123',)",
    ]
    assert find_leaks({"abc123"}, ["nothing here"]) == []


def test_debug_lines_are_captured_during_a_login(
    web: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.clear()
    submit(web, "acme", oss_fields(ACME_STS))
    loggers = {record.name for record in caplog.records}
    levels = {record.levelno for record in caplog.records}
    assert logging.DEBUG in levels
    assert {
        "urllib3.connectionpool",
        "qwen_ui.auth.keys",
    } & loggers or "urllib3.connectionpool" in loggers
    text = "\n".join(captured_lines(caplog.records, services_of(web.app).settings.home))
    for secret in (ACME_STS.secret, ACME_STS.sts_token or "", session_cookie(web) or "x" * 43):
        assert secret not in text
    assert ACME.secret not in text
