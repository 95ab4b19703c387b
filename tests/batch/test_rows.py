from __future__ import annotations

import json
from pathlib import Path

import pytest

from qwen_ui.batch.errors import BatchInputError
from qwen_ui.batch.rows import Row, read_rows


def test_jsonl_rows_with_and_without_ids(tmp_path: Path) -> None:
    lines = [
        {"id": "a", "images": ["x.png", "/abs/y.png"], "question": "Q1"},
        {"image": "z.jpg", "question": "Q2"},
        {"id": 7, "images": "oss://bucket/k.png", "question": "Q3"},
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    rows = read_rows(path)
    assert rows == [
        Row(1, "a", "Q1", (str(tmp_path / "x.png"), "/abs/y.png")),
        Row(2, "2", "Q2", (str(tmp_path / "z.jpg"),)),
        Row(3, "7", "Q3", ("oss://bucket/k.png",)),
    ]
    assert [row.key for row in rows] == ["a", "2", "7"]


def test_csv_rows_split_images_on_bars(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text('id,images,question\n,a.png|b.png,"How many, exactly?"\nq2,c.png,Why\n')
    rows = read_rows(path)
    assert rows[0] == Row(
        1, "1", "How many, exactly?", (str(tmp_path / "a.png"), str(tmp_path / "b.png"))
    )
    assert rows[1] == Row(2, "q2", "Why", (str(tmp_path / "c.png"),))


def test_bad_rows_carry_their_error_and_do_not_stop_the_others(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(
        '{"question": "ok", "images": []}\nnot json\n[1, 2]\n'
        '{"question": 3}\n{"question": "q", "images": [1]}\n{"id": "1", "question": "dup"}\n'
    )
    rows = read_rows(path)
    codes = [row.problem.code if row.problem else None for row in rows]
    assert codes == [None, "bad_row", "bad_row", "bad_row", "bad_row", "duplicate_id"]
    assert rows[5].key == "1#6"  # a repeated id is resumed by its row number


@pytest.mark.parametrize(
    "name, text",
    [("in.csv", "question,path\nq,a.png\n"), ("in.csv", ""), ("in.jsonl", None)],
)
def test_unreadable_input_stops_before_any_row(tmp_path: Path, name: str, text: str | None) -> None:
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(BatchInputError):
        read_rows(path)
