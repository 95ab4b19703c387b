"""``qwen-ui demo eval`` end to end on a few questions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qwen_ui.cli import main
from qwen_ui.demo import scenes

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("revision", ["bf16", "awq"])
def test_demo_eval_json(revision: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "demo",
            "eval",
            "--n",
            "16",
            "--revision",
            revision,
            "--json",
            "--model-dir",
            str(tmp_path),
        ]
    )
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["revision"] == revision and result["n"] == 16
    assert set(result["by_kind"]) == set(scenes.KINDS)
    assert result["overall"]["total"] == 16
    assert sum(r["correct"] for r in result["by_lang"].values()) == result["overall"]["correct"]
    assert result["path"].endswith(f"weights/{revision}")  # store empty: the package copy


def test_demo_eval_of_one_type(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["demo", "eval", "--n", "8", "--kind", "spatial", "--json"]
    assert main([*args, "--model-dir", str(tmp_path)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["kinds"] == ["spatial"] and list(result["by_kind"]) == ["spatial"]
    assert result["by_kind"]["spatial"]["total"] == 8
    assert sum(r["total"] for r in result["by_spatial"].values()) == 8


def test_demo_eval_rejects_an_unknown_type(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["demo", "eval", "--kind", "colours"])
    assert exc.value.code == 2
    assert "invalid choice: 'colours'" in capsys.readouterr().err


def test_demo_eval_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "eval", "--n", "16", "--model-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "overall" in out and "by question type:" in out and "multi_compare" in out


def test_demo_eval_rejects_an_unknown_device(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["demo", "eval", "--device", "tpu"])
    assert exc.value.code == 2
    assert "invalid choice: 'tpu'" in capsys.readouterr().err
