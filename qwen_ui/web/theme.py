"""Loading a UI theme by name from the themes folder: ``<dir>/<name>/theme.py`` + CSS."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from qwen_ui.errors import QwenUIError


class ThemeNotFound(QwenUIError):
    code = "theme_not_found"
    en = "Theme '{name}' was not found in {folder}."
    zh = "在 {folder} 中找不到主题“{name}”。"


@dataclass(frozen=True)
class Theme:
    theme: gr.themes.Base
    css_paths: list[Path]


def load_theme(themes_dir: Path, name: str) -> Theme:
    folder = themes_dir / name
    module_path = folder / "theme.py"
    if not module_path.is_file():
        raise ThemeNotFound(name=name, folder=str(themes_dir))
    spec = importlib.util.spec_from_file_location(f"qwen_ui_theme_{name}", module_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Theme(theme=module.build(), css_paths=sorted(folder.glob("*.css")))
