"""Running a ``bench/`` or ``training/`` script's ``main`` in-process, as its command does."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def run_main(
    script: str, argv: list[str], capsys: pytest.CaptureFixture[str], folder: Path = BENCH
) -> dict[str, object]:
    """``<folder>/<script>.py``'s ``main(argv)``, which must return 0; its JSON on stdout."""
    module = load_script(script, folder)
    sys.path.insert(0, str(folder))
    try:
        assert module.main(argv) == 0
    finally:
        sys.path.remove(str(folder))
    return dict(json.loads(capsys.readouterr().out))


def load_script(script: str, folder: Path = BENCH) -> Any:
    """``<folder>/<script>.py`` as a module, imported with its folder on ``sys.path``."""
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location(script, folder / f"{script}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[script] = module  # where dataclasses look their module up
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(folder))
    return module
