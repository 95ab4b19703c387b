from __future__ import annotations

import json
from pathlib import Path

from qwen_ui.batch.errors import DuplicateRowId
from qwen_ui.batch.output import Output, RowResult, done_keys, drop_failed
from qwen_ui.batch.rows import Row


def test_lines_are_appended_and_found_again(tmp_path: Path) -> None:
    path = tmp_path / "out" / "answers.jsonl"
    with Output(path) as out:
        out.write(RowResult(Row(1, "a", "Q", ("x.png",)), "yes", [], {"row": 0.1}))
        out.write(RowResult(Row(2, "b", "Q", ()), error={"code": "no_question"}))
    with Output(path) as out:
        out.write(RowResult(Row(3, "c", "Q", ()), "2"))
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["id"] for r in records] == ["a", "b", "c"]
    assert records[0] == {
        "id": "a",
        "row": 1,
        "images": ["x.png"],
        "answer": "yes",
        "boxes": [],
        "timings": {"row": 0.1},
        "error": None,
    }
    assert done_keys(path) == {"a", "b", "c"}


def test_a_torn_last_line_is_not_done_and_stays_apart(tmp_path: Path) -> None:
    path = tmp_path / "answers.jsonl"
    path.write_text('{"id": "a", "row": 1}\n{"id": "b", "ro')
    assert done_keys(path) == {"a"}
    with Output(path) as out:
        out.write(RowResult(Row(2, "b", "Q", ()), "ok"))
    assert done_keys(path) == {"a", "b"}
    assert path.read_text().splitlines()[1] == '{"id": "b", "ro'


def test_duplicate_rows_are_done_by_row_number(tmp_path: Path) -> None:
    path = tmp_path / "answers.jsonl"
    row = Row(6, "1", "Q", (), DuplicateRowId(row=6, row_id="1"))
    with Output(path) as out:
        out.write(RowResult(row, error={"code": "duplicate_id"}))
    assert done_keys(path) == {"1#6"} == {row.key}


def test_no_output_yet(tmp_path: Path) -> None:
    assert done_keys(tmp_path / "none.jsonl") == set()


def test_failed_rows_are_dropped_to_run_again(tmp_path: Path) -> None:
    path = tmp_path / "answers.jsonl"
    with Output(path) as out:
        out.write(RowResult(Row(1, "a", "Q", ()), "yes"))
        out.write(RowResult(Row(2, "b", "Q", ()), error={"code": "server_unreachable"}))
        out.write(RowResult(Row(3, "c", "Q", ()), "2"))
    with path.open("a") as file:
        file.write('{"id": "d", "ro')  # torn by a killed run
    assert drop_failed(path) == 1
    assert done_keys(path) == {"a", "c"}
    assert [json.loads(line)["id"] for line in path.read_text().splitlines()] == ["a", "c"]
    before = path.stat().st_mtime_ns
    assert drop_failed(path) == 0 and path.stat().st_mtime_ns == before  # nothing to drop
    assert drop_failed(tmp_path / "none.jsonl") == 0
    assert not (tmp_path / "none.jsonl").exists()
