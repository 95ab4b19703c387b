"""The audit log: one JSON line per login attempt and per question, in ``LOG_DIR/audit.jsonl``.

Lines carry who (tenant, user or key id), what, the outcome, the request id, counts and
timings. They never carry a secret, token, password, session id or image bytes: callers
pass only named fields of plain types, and fields named like secrets are refused.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from qwen_ui.auth.principal import Principal

log = logging.getLogger(__name__)

FILE_NAME = "audit.jsonl"
Scalar = str | int | float | bool | None
_FORBIDDEN = re.compile(r"secret|password|token|session|cookie|authorization|image_bytes", re.I)
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def request_id_from(header: str | None) -> str:
    """The caller's X-Request-ID when it is well formed, else a new one."""
    if header and _REQUEST_ID.match(header):
        return header
    return uuid.uuid4().hex


@dataclass
class AuditLog:
    folder: Path
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def path(self) -> Path:
        return self.folder / FILE_NAME

    def write(self, event: str, **fields: Scalar | dict[str, float]) -> None:
        bad = [name for name in fields if _FORBIDDEN.search(name)]
        if bad:
            raise ValueError(f"audit fields may not carry secrets: {bad}")
        line: dict[str, Scalar | dict[str, float]] = {
            "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "event": event,
            **fields,
        }
        text = json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n"
        try:
            with self._lock:
                self.folder.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                with os.fdopen(fd, "a", encoding="utf-8") as handle:
                    handle.write(text)
        except OSError as exc:
            log.error("cannot write the audit log %s: %s", self.path, exc.strerror)

    def login(
        self,
        *,
        tenant: str,
        user: str,
        method: str,
        outcome: str,
        ip: str,
        request_id: str,
        ms: float,
    ) -> None:
        self.write(
            "login",
            tenant=tenant,
            user=user,
            method=method,
            outcome=outcome,
            ip=ip,
            request_id=request_id,
            ms=round(ms, 1),
        )

    def logout(self, principal: Principal, request_id: str) -> None:
        self.write("logout", tenant=principal.tenant, user=principal.user, request_id=request_id)

    def question(
        self,
        principal: Principal,
        *,
        request_id: str,
        outcome: str,
        counts: dict[str, float] | None = None,
        timings: dict[str, float] | None = None,
    ) -> None:
        """For the engine: one line per question (counts: images, tokens…; timings in s)."""
        self.write(
            "question",
            tenant=principal.tenant,
            user=principal.user,
            method=principal.method,
            request_id=request_id,
            outcome=outcome,
            counts=counts or {},
            timings=timings or {},
        )
