"""The seam's direction, pinned: admission imports one module of plain types from the
engine and nothing from the web layer or the services; the engine imports nothing from
admission, the web layer or the services (a question's path never calls back up)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "qwen_ui"
SHARED = "qwen_ui.engine.shapes"


def imported(folder: str) -> dict[str, set[str]]:
    """Every module (and imported name) of each file of ``qwen_ui/<folder>``."""
    found: dict[str, set[str]] = {}
    for path in sorted((PACKAGE / folder).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
        found[path.name] = names
    return found


def reaching(folder: str, *prefixes: str) -> dict[str, set[str]]:
    return {
        name: hits
        for name, modules in imported(folder).items()
        if (hits := {m for m in modules if m.startswith(prefixes)})
    }


def test_admission_imports_only_the_shared_shapes_from_the_engine() -> None:
    engine = reaching("admission", "qwen_ui.engine")
    assert engine, "the scan found no import of the shared module at all"
    leaks = {
        name: {m for m in modules if not m.startswith(SHARED)} for name, modules in engine.items()
    }
    assert all(not modules for modules in leaks.values()), leaks


def test_admission_never_reaches_up() -> None:
    assert reaching("admission", "qwen_ui.web", "qwen_ui.services", "qwen_ui.server") == {}


def test_the_engine_never_reaches_up() -> None:
    up = ("qwen_ui.admission", "qwen_ui.web", "qwen_ui.services", "qwen_ui.server")
    assert reaching("engine", *up) == {}


def test_auth_holds_no_http_code() -> None:
    assert reaching("auth", "qwen_ui.web", "fastapi", "starlette") == {}
