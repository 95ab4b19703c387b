"""The batch's output: JSON lines, one per finished row, appended and flushed as rows end
(in the order they finish), so an interrupted run loses at most the rows in flight and a
re-run skips every row already written.

A line: ``{"id", "row", "images", "answer", "boxes", "timings", "error"}``. ``answer`` is
the answer as a person reads it (boxes written as their labels), ``boxes`` as the API's
``done`` event gives them (original pixels, 1-based image numbers), ``timings`` the
server's stage seconds plus ``row`` (this row's wall time, retries included); ``error`` is
null or ``{"code", "message", "status"}``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from qwen_ui.batch.rows import Row, resume_key


@dataclass(frozen=True)
class RowResult:
    row: Row
    answer: str | None = None
    boxes: list[dict[str, Any]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    error: dict[str, Any] | None = None

    def record(self) -> dict[str, Any]:
        return {
            "id": self.row.id,
            "row": self.row.number,
            "images": list(self.row.images),
            "answer": self.answer,
            "boxes": self.boxes,
            "timings": self.timings,
            "error": self.error,
        }


def done_keys(path: Path) -> set[str]:
    """The rows already written to ``path`` (a torn last line, from a killed run, is not
    one: that row runs again)."""
    keys = set()
    for _, record in _records(path):
        if record is not None:
            error = record.get("error") or {}
            code = error.get("code") if isinstance(error, dict) else None
            keys.add(resume_key(str(record["id"]), int(record.get("row", 0)), code))
    return keys


def drop_failed(path: Path) -> int:
    """Rewrite ``path`` without its failed rows' lines (and torn ones), so that the run
    asks those rows again; how many rows were dropped. The new file replaces the old one
    whole, so an interruption leaves one or the other."""
    lines = list(_records(path))
    kept = [line + "\n" for line, record in lines if record is not None and not record.get("error")]
    failed = sum(1 for _, record in lines if record is not None and record.get("error"))
    if len(kept) < len(lines):
        partial = path.with_name(path.name + ".partial")
        partial.write_text("".join(kept), encoding="utf-8")
        os.replace(partial, path)
    return failed


def _records(path: Path) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """Each line of ``path`` with its record (None: not one of ours, e.g. torn)."""
    if not path.exists():
        return
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        yield line, record if isinstance(record, dict) and "id" in record else None


class Output:
    """Appends records to the output file, one flushed line each."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = None

    def __enter__(self) -> Output:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        torn = self.path.exists() and not _ends_with_newline(self.path)
        self._file = self.path.open("a", encoding="utf-8")
        if torn:
            self._file.write("\n")  # a killed run's partial line stays apart
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def write(self, result: RowResult) -> None:
        assert self._file is not None, "use Output as a context manager"
        self._file.write(json.dumps(result.record(), ensure_ascii=False) + "\n")
        self._file.flush()


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as file:
        if file.seek(0, 2) == 0:
            return True
        file.seek(-1, 2)
        return file.read(1) == b"\n"
