"""Several ``qwen-ui demo eval`` runs in one process, each into its own JSON file."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from qwen_ui.demo.install import weights_dir
from training import eval_demo


def test_a_run_is_a_file_and_demo_eval_arguments() -> None:
    name, argv = eval_demo.parse_run("g.json=--n 20 --kind off_grammar --device cuda")
    assert name == "g.json"
    assert argv[:2] == ["demo", "eval"] and argv[-1] == "--json"
    assert argv[2:-1] == ["--n", "20", "--kind", "off_grammar", "--device", "cuda"]


@pytest.mark.parametrize("spec", ["--n 20", "=--n 20", "sub/g.json=--n 20"])
def test_a_run_needs_a_plain_file_name(spec: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        eval_demo.parse_run(spec)


def test_a_bad_option_stops_before_any_run(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        eval_demo.main([str(tmp_path), "a.json=--n 2", "b.json=--kind colours"])
    assert exc.value.code == 2
    assert not (tmp_path / "a.json").exists()


@pytest.mark.slow
def test_runs_score_a_checkpoint_folder(tmp_path: Path) -> None:
    weights = tmp_path / "candidate"
    shutil.copytree(weights_dir("bf16"), weights)
    out = tmp_path / "out"
    common = f"--weights {weights} --device cpu --batch-size 4"
    runs = [f"grammar.json={common} --n 4", f"off.json={common} --kind off_grammar --n 2"]
    assert eval_demo.main([str(out), *runs]) == 0
    grammar = json.loads((out / "grammar.json").read_text())
    off = json.loads((out / "off.json").read_text())
    assert grammar["path"] == str(weights) and grammar["overall"]["total"] == 4
    assert grammar["vision_ids"] is False  # the folder's qwen_ui.json, as the engine reads it
    assert off["kinds"] == ["off_grammar"] and off["by_kind"]["off_grammar"]["total"] == 2


@pytest.mark.slow
def test_a_failed_run_is_reported_and_the_next_still_runs(tmp_path: Path) -> None:
    common = "--device cpu --batch-size 2"
    runs = [f"bad.json={common} --weights {tmp_path / 'missing'} --n 2", f"ok.json={common} --n 2"]
    assert eval_demo.main([str(tmp_path), *runs]) == 1
    assert json.loads((tmp_path / "ok.json").read_text())["overall"]["total"] == 2
