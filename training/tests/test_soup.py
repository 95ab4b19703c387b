"""Weight averages of two checkpoints and the choice among them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from training import soup


def checkpoint(folder: Path, scale: float) -> Path:
    folder.mkdir()
    parts = {
        "model-00001-of-00002.safetensors": {"a": torch.full((2, 3), scale)},
        "model-00002-of-00002.safetensors": {"b": torch.arange(4.0) * scale},
    }
    weight_map = {}
    for name, tensors in parts.items():
        save_file({k: v.to(torch.bfloat16) for k, v in tensors.items()}, str(folder / name))
        weight_map.update(dict.fromkeys(tensors, name))
    (folder / soup.INDEX).write_text(json.dumps({"weight_map": weight_map}), encoding="utf-8")
    (folder / "config.json").write_text(json.dumps({"scale": scale}), encoding="utf-8")
    return folder


def test_average_mixes_every_tensor_and_keeps_the_files(tmp_path: Path) -> None:
    a = checkpoint(tmp_path / "a", 1.0)
    b = checkpoint(tmp_path / "b", 3.0)
    soup.average(a, b, 0.25, tmp_path / "mix")
    first = load_file(str(tmp_path / "mix" / "model-00001-of-00002.safetensors"))
    second = load_file(str(tmp_path / "mix" / "model-00002-of-00002.safetensors"))
    assert first["a"].dtype == torch.bfloat16
    assert torch.equal(first["a"].float(), torch.full((2, 3), 1.5))
    assert torch.equal(second["b"].float(), torch.arange(4.0) * 1.5)
    assert json.loads((tmp_path / "mix" / "config.json").read_text()) == {"scale": 1.0}
    assert (tmp_path / "mix" / soup.INDEX).is_file()


def test_average_rejects_an_alpha_outside_the_segment(tmp_path: Path) -> None:
    a = checkpoint(tmp_path / "a", 1.0)
    with pytest.raises(ValueError, match="alpha"):
        soup.average(a, a, 1.5, tmp_path / "mix")


def test_average_rejects_checkpoints_of_other_tensors(tmp_path: Path) -> None:
    a = checkpoint(tmp_path / "a", 1.0)
    b = checkpoint(tmp_path / "b", 2.0)
    save_file({"c": torch.zeros(1)}, str(b / "model-00002-of-00002.safetensors"))
    with pytest.raises(ValueError, match="missing"):
        soup.average(a, b, 0.5, tmp_path / "mix")


def evaluation(path: Path, kinds: dict[str, tuple[int, int]]) -> Path:
    correct = sum(c for c, _ in kinds.values())
    total = sum(t for _, t in kinds.values())
    result = {
        "overall": {"accuracy": correct / total, "correct": correct, "total": total},
        "by_kind": {k: {"accuracy": c / t} for k, (c, t) in kinds.items()},
    }
    path.write_text(json.dumps(result), encoding="utf-8")
    return path


def test_choose_takes_the_best_weakest_type_with_refusals_counted(tmp_path: Path) -> None:
    # "0" is best overall on the grammar, but its refusals are its weakest type
    candidates = {
        "0": [
            evaluation(tmp_path / "g0.json", {"count": (99, 100), "multi_count": (96, 100)}),
            evaluation(tmp_path / "r0.json", {"off_grammar": (94, 100)}),
        ],
        "0.5": [
            evaluation(tmp_path / "g5.json", {"count": (97, 100), "multi_count": (95, 100)}),
            evaluation(tmp_path / "r5.json", {"off_grammar": (97, 100)}),
        ],
    }
    assert soup.choose(candidates) == "0.5"


def test_choose_breaks_ties_by_the_overall_accuracy(tmp_path: Path) -> None:
    candidates = {
        "a": [evaluation(tmp_path / "a.json", {"count": (95, 100), "total": (96, 100)})],
        "b": [evaluation(tmp_path / "b.json", {"count": (95, 100), "total": (99, 100)})],
    }
    assert soup.choose(candidates) == "b"


def test_main_prints_the_choice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    low = evaluation(tmp_path / "low.json", {"count": (90, 100)})
    high = evaluation(tmp_path / "high.json", {"count": (98, 100)})
    assert soup.main(["choose", f"x={low}", f"y={high}"]) == 0
    assert capsys.readouterr().out == "y\n"
