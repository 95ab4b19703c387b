"""The audit log: JSON lines, never a secret-named field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qwen_ui.auth.audit import AuditLog, request_id_from
from qwen_ui.auth.principal import Principal


def test_question_line(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "logs")
    log.question(
        Principal("acme", "LTAIx", "oss"),
        request_id="r1",
        outcome="ok",
        counts={"images": 2, "tokens": 40},
        timings={"total_s": 1.5},
    )
    line = json.loads((tmp_path / "logs" / "audit.jsonl").read_text())
    assert line["event"] == "question" and line["tenant"] == "acme"
    assert line["counts"] == {"images": 2, "tokens": 40} and line["timings"] == {"total_s": 1.5}
    assert oct((tmp_path / "logs" / "audit.jsonl").stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize(
    "name", ["secret", "password", "sts_token", "session_id", "api_token", "image_bytes"]
)
def test_secret_fields_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError):
        AuditLog(tmp_path).write("x", **{name: "v"})


def test_request_ids() -> None:
    assert request_id_from("abc-123") == "abc-123"
    assert len(request_id_from("bad id\n")) == 32
    assert len(request_id_from(None)) == 32
