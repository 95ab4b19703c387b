"""Installing the shipped demo model into the store."""

from __future__ import annotations

from pathlib import Path

from qwen_ui.cli import main
from qwen_ui.demo.install import REVISIONS, ensure_demo, install_demo, shipped_revisions
from qwen_ui.settings import DEMO_MODEL_ID
from qwen_ui.store import ModelStore


def test_both_revisions_ship() -> None:
    assert shipped_revisions() == list(REVISIONS)


def test_install_demo_resolves_and_is_idempotent(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    first = install_demo(store)
    assert set(first) == {"bf16", "awq"}
    for revision, snapshot in first.items():
        resolved = store.resolve(DEMO_MODEL_ID, revision)
        assert resolved.id == snapshot.id
        assert (resolved.path / "config.json").is_file()
    assert {r: s.id for r, s in install_demo(store).items()} == {r: s.id for r, s in first.items()}


def test_ensure_demo_installs_once(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    assert ensure_demo(store, "bf16") is True
    assert store.is_installed(DEMO_MODEL_ID, "awq")
    assert ensure_demo(store, "bf16") is False


def test_models_install_demo_command(tmp_path: Path, capsys: object) -> None:
    assert main(["models", "install-demo", "--model-dir", str(tmp_path)]) == 0
    store = ModelStore(tmp_path)
    assert store.is_installed(DEMO_MODEL_ID, "bf16") and store.is_installed(DEMO_MODEL_ID, "awq")
