"""`qwen-ui serve --help` lists every setting; flags override settings."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from qwen_ui.cli import build_parser
from qwen_ui.cli.serve import settings_from_args
from qwen_ui.settings import field_rows


def test_help_lists_every_setting(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    out = capsys.readouterr().out
    for row in field_rows():
        assert row["flag"] in out, row["flag"]
        assert row["env"] in out.replace("\n", " ").replace("  ", " ") or row["env"] in out


def test_flags_override_settings(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["serve", "--home", str(tmp_path), "--port", "9001", "--no-preload"]
    )
    assert isinstance(args, argparse.Namespace)
    settings = settings_from_args(args)
    assert (settings.port, settings.preload, settings.home) == (9001, False, tmp_path)
