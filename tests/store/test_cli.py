"""``qwen-ui models …`` through ``qwen_ui.cli.main``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from qwen_ui.cli import main
from qwen_ui.store import ModelStore
from tests.store.support import make_model

MODEL = "Qwen/Tiny-VL"


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The store root, reached through QWEN_UI_HOME as a user would."""
    monkeypatch.setenv("QWEN_UI_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("QWEN_UI_MODEL_DIR", raising=False)
    return tmp_path / "home" / "models"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["models", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_install_resolve_list(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = make_model(tmp_path / "src")
    code, out, _ = run(capsys, "install", str(src), "--model-id", MODEL)
    assert code == 0
    snap = ModelStore(root).resolve(MODEL, "master")
    assert f"installed {MODEL}@master -> snapshot {snap.short_id}" in out
    code, out, _ = run(capsys, "install", str(src), "--model-id", MODEL)
    assert code == 0 and out.startswith("already installed")

    code, out, _ = run(capsys, "resolve", MODEL)
    assert (code, out) == (0, f"{snap.path}\n")

    code, out, _ = run(capsys, "list")
    header, row = out.splitlines()
    assert header.split() == ["MODEL", "REVISION", "SNAPSHOT", "SIZE", "INSTALLED"]
    assert row.split()[:4] == [MODEL, "master", snap.short_id, "68.4"]
    code, out, _ = run(capsys, "list", "--json")
    assert json.loads(out)["snapshot"] == snap.id

    code, out, _ = run(capsys, "root")
    assert out.strip() == str(root)


def test_model_dir_flag_wins(
    tmp_path: Path, root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "essd"
    code, _out, _ = run(
        capsys,
        "install",
        str(make_model(tmp_path / "s")),
        "--model-id",
        MODEL,
        "--revision",
        "v1",
        "--model-dir",
        str(other),
    )
    assert code == 0
    assert ModelStore(other).is_installed(MODEL, "v1")
    assert not ModelStore(root).is_installed(MODEL, "v1")


def test_env_model_dir(
    tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("QWEN_UI_MODEL_DIR", str(tmp_path / "data"))
    assert run(capsys, "root")[1].strip() == str(tmp_path / "data")


def test_resolve_errors(root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "resolve", MODEL)
    assert code == 2 and out == ""
    assert f"qwen-ui models install DIR --model-id {MODEL} --revision master" in err
    for rev in ("a", "b"):
        run(
            capsys,
            "install",
            str(make_model(tmp_path / rev)),
            "--model-id",
            MODEL,
            "--revision",
            rev,
        )
    code, _out, err = run(capsys, "resolve", MODEL)
    assert code == 2 and "has revisions a, b; pass --revision" in err
    assert run(capsys, "resolve", MODEL, "--revision", "b")[0] == 0
    code, _out, err = run(capsys, "resolve", "not-an-id")
    assert code == 2 and "not a model id" in err


def test_verify(root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "install", str(make_model(tmp_path / "a", seed=1)), "--model-id", MODEL)
    run(capsys, "install", str(make_model(tmp_path / "b", seed=2)), "--model-id", "o/m")
    code, out, _ = run(capsys, "verify")
    assert code == 0 and out.count("sizes checked") == 2
    code, out, _ = run(capsys, "verify", "--full")
    assert code == 0 and out.count("sha256 checked") == 2

    victim = ModelStore(root).resolve(MODEL, "master").path / "tokenizer.json"
    os.chmod(victim, 0o644)
    victim.write_bytes(victim.read_bytes().upper())
    code, out, _ = run(capsys, "verify", MODEL)
    assert code == 0
    code, out, err = run(capsys, "verify", "--full")
    assert code == 1
    assert "ok     o/m@master" in out
    assert f"FAILED {MODEL}@master" in err and "(tokenizer.json)" in err
    assert str(victim) in err

    code, _out, err = run(capsys, "verify", "nobody/x")
    assert code == 1 and "is not installed" in err


def test_gc_remove_adopt(root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "install", str(make_model(tmp_path / "a", seed=1)), "--model-id", MODEL)
    old = ModelStore(root).resolve(MODEL, "master")
    run(capsys, "install", str(make_model(tmp_path / "b", seed=2)), "--model-id", MODEL)
    code, out, _ = run(capsys, "list")
    assert "gc` removes it" in out
    code, out, _ = run(capsys, "gc", "--dry-run")
    assert code == 0 and f"would remove snapshot {MODEL} {old.short_id}" in out
    assert old.path.exists()
    code, out, _ = run(capsys, "gc")
    assert code == 0 and f"removed snapshot {MODEL} {old.short_id}" in out
    assert not old.path.exists()

    code, out, _ = run(capsys, "remove", MODEL)
    assert code == 0 and out.startswith(f"removed {MODEL}")
    assert run(capsys, "list")[1].startswith("no models in")

    cache = tmp_path / "cache"
    make_model(cache / "models" / "Qwen--Tiny-VL" / "snapshots" / "master")
    code, out, _ = run(capsys, "adopt", str(cache))
    assert code == 0 and f"installed {MODEL}@master" in out
    code, _out, err = run(capsys, "adopt", str(make_model(tmp_path / "flat")))
    assert code == 2 and "pass --model-id" in err


def test_install_missing_dir(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _out, err = run(capsys, "install", str(tmp_path / "nope"), "--model-id", MODEL)
    assert code == 2 and "is not a directory" in err


FP8_CONFIG = (
    b'{"model_type": "qwen3_vl", "architectures": ["Qwen3VLForConditionalGeneration"], '
    b'"quantization_config": {"quant_method": "fp8", "fmt": "e4m3"}}'
)


def test_install_and_adopt_refuse_a_layout_the_engine_cannot_run(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = {"config.json": FP8_CONFIG, "model.safetensors": b"x" * 100}
    src = make_model(tmp_path / "fp8", files)
    code, out, err = run(capsys, "install", str(src), "--model-id", MODEL)
    assert code == 2 and out == ""
    assert err.startswith("error: This checkpoint cannot run on the local engine: FP8 weights")
    assert "Qwen/Qwen3-VL-8B-Instruct" in err  # what to install instead
    cache = tmp_path / "cache"
    make_model(cache / "models" / "Qwen--Tiny-VL" / "snapshots" / "master", files)
    code, _out, err = run(capsys, "adopt", str(cache))
    assert code == 2 and "FP8 weights" in err
    assert not ModelStore(root).is_installed(MODEL, "master")  # nothing was copied
    code, out, _ = run(capsys, "install", str(src), "--model-id", MODEL, "--skip-layout-check")
    assert code == 0 and f"installed {MODEL}@master" in out


def test_install_names_the_layout_it_accepted(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _out, err = run(capsys, "install", str(make_model(tmp_path / "a")), "--model-id", MODEL)
    assert code == 0 and "checkpoint layout: Qwen2.5-VL, unquantized" in err
