"""Settings: declared once, derived paths, bounds, env overrides, README table in sync."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

import qwen_ui
from qwen_ui.settings import Settings, field_rows, markdown_table

README = Path(__file__).resolve().parent.parent / "README.md"


def test_home_moves_every_derived_path(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    assert settings.model_path == tmp_path / "models"
    assert settings.tenants_path == tmp_path / "tenants.toml"
    assert settings.key_path == tmp_path / "keys" / "server.key"
    assert settings.log_path == tmp_path / "logs"


def test_explicit_path_wins_over_home(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, model_dir=tmp_path / "essd")
    assert settings.model_path == tmp_path / "essd"


def test_env_prefix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("QWEN_UI_HOME", str(tmp_path))
    monkeypatch.setenv("QWEN_UI_PORT", "8123")
    monkeypatch.setenv("QWEN_UI_PRELOAD", "1")
    settings = Settings()
    assert (settings.home, settings.port, settings.preload) == (tmp_path, 8123, True)


def test_defaults_bind_loopback_7860(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    assert (settings.host, settings.port, settings.ui_path) == ("127.0.0.1", 7860, "/")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("port", 0),
        ("port", 70000),
        ("max_images", 0),
        ("temperature", 3.0),
        ("top_p", 0.0),
        ("model_id", "no-slash"),
        ("ui_path", "ui"),
        ("language", "fr"),
    ],
)
def test_bounds_are_enforced(tmp_path: Path, field: str, value: object) -> None:
    with pytest.raises(ValidationError):
        Settings(home=tmp_path, **{field: value})


def test_cross_field_bounds(tmp_path: Path) -> None:
    with pytest.raises(ValidationError):
        Settings(home=tmp_path, min_pixels=10_000, max_pixels=5_000)
    with pytest.raises(ValidationError):
        Settings(home=tmp_path, max_new_tokens=100, max_new_tokens_limit=50)


def test_every_field_is_described() -> None:
    for row in field_rows():
        assert row["description"], row["name"]


def test_secrets_are_not_in_repr(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, metrics_token="tok-123", secret_key="k-456")
    assert "tok-123" not in repr(settings) and "k-456" not in repr(settings)


def test_readme_table_matches_declarations() -> None:
    text = README.read_text(encoding="utf-8")
    match = re.search(r"<!-- settings:start -->\n(.*?)\n<!-- settings:end -->", text, re.S)
    assert match, "README lacks the settings markers"
    assert match.group(1).strip() == markdown_table().strip(), (
        "README configuration table drifted: regenerate with `qwen-ui settings-doc`"
    )


def test_themes_ship_inside_the_package(tmp_path: Path) -> None:
    themes = Settings(home=tmp_path).themes_dir
    assert themes == Path(qwen_ui.__file__).resolve().parent / "themes"
    assert (themes / "qwen" / "theme.py").is_file() and (themes / "qwen" / "style.css").is_file()


def test_themes_dir_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("QWEN_UI_THEMES_DIR", str(tmp_path / "my-themes"))
    assert Settings(home=tmp_path).themes_dir == tmp_path / "my-themes"
