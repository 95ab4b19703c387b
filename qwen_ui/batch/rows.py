"""The rows of a batch: a CSV or JSONL file, one question per row.

JSONL: one object per line, ``{"id": ..., "images": [...] | "image": ..., "question":
...}``. CSV: a header with ``question`` and ``images`` (several separated by ``|``) or
``image``, and optionally ``id``. A row without an id gets its row number (1-based, data
rows only), so a re-run of the same file finds the same ids. Relative image paths are
relative to the input file's folder; ``oss://KEY`` names an object of the tenant's OSS
prefix. A row that cannot be read becomes a row with its error, never a stopped run.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qwen_ui.batch.errors import BadRow, BatchInputError, DuplicateRowId
from qwen_ui.errors import QwenUIError

OSS_SCHEME = "oss://"
IMAGE_SEPARATOR = "|"


@dataclass(frozen=True)
class Row:
    """One question. ``images``: paths (absolute) or ``oss://`` keys, as given;
    ``problem``: why the row cannot run (it is then written as failed)."""

    number: int
    id: str
    question: str
    images: tuple[str, ...]
    problem: QwenUIError | None = None

    @property
    def key(self) -> str:
        """What marks the row done in the output: its id (a repeated id: with its number)."""
        return resume_key(self.id, self.number, self.problem.code if self.problem else None)


def resume_key(row_id: str, number: int, code: str | None) -> str:
    return f"{row_id}#{number}" if code == DuplicateRowId.code else row_id


def read_rows(path: Path) -> list[Row]:
    """Every row of ``path`` (``.csv``, or JSON lines for ``.jsonl``/``.ndjson``/``.json``)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise BatchInputError(path=str(path), problem=type(exc).__name__) from exc
    raw = _csv_rows(text, path) if path.suffix.lower() == ".csv" else _json_rows(text)
    return _unique([_row(number, fields, path.parent) for number, fields in raw])


def _json_rows(text: str) -> Iterator[tuple[int, dict[str, Any] | BadRow]]:
    lines = (line for line in text.splitlines() if line.strip())
    for number, line in enumerate(lines, start=1):
        try:
            value = json.loads(line)
        except ValueError:
            yield number, BadRow(row=number, problem="not a JSON object")
            continue
        if not isinstance(value, dict):
            yield number, BadRow(row=number, problem="not a JSON object")
            continue
        yield number, value


def _csv_rows(text: str, path: Path) -> Iterator[tuple[int, dict[str, Any] | BadRow]]:
    reader = csv.DictReader(text.splitlines())
    columns = set(reader.fieldnames or ())
    if "question" not in columns or not columns & {"image", "images"}:
        problem = "the header needs a 'question' and an 'images' (or 'image') column"
        raise BatchInputError(path=str(path), problem=problem)
    for number, record in enumerate(reader, start=1):
        fields: dict[str, Any] = {k: v for k, v in record.items() if k is not None}
        images = fields.get("images") or fields.get("image") or ""
        fields["images"] = [p.strip() for p in str(images).split(IMAGE_SEPARATOR) if p.strip()]
        yield number, fields


def _row(number: int, fields: dict[str, Any] | BadRow, folder: Path) -> Row:
    if isinstance(fields, BadRow):
        return Row(number, str(number), "", (), fields)
    row_id = _id(fields.get("id"), number)
    question = fields.get("question")
    images = fields.get("images", fields.get("image", []))
    images = [images] if isinstance(images, str) else images
    problem: QwenUIError | None = None
    if not isinstance(question, str):
        problem, question = BadRow(row=number, problem="'question' must be text"), ""
    if not isinstance(images, list) or not all(isinstance(p, str) for p in images):
        problem, images = BadRow(row=number, problem="'images' must be a list of paths"), []
    return Row(number, row_id, question, tuple(_where(p, folder) for p in images), problem)


def _id(value: Any, number: int) -> str:
    if value is None or (isinstance(value, str) and not value.strip()):
        return str(number)
    return str(value).strip()


def _where(image: str, folder: Path) -> str:
    if image.startswith(OSS_SCHEME):
        return image
    path = Path(image).expanduser()
    return str(path if path.is_absolute() else folder / path)


def _unique(rows: list[Row]) -> list[Row]:
    """A repeated id is an error on the later rows (resuming finds rows by id)."""
    seen: set[str] = set()
    out = []
    for row in rows:
        if row.id in seen and row.problem is None:
            row = Row(row.number, row.id, row.question, row.images, _duplicate(row))
        seen.add(row.id)
        out.append(row)
    return out


def _duplicate(row: Row) -> QwenUIError:
    return DuplicateRowId(row=row.number, row_id=row.id)
