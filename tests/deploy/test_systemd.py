"""The systemd unit: required keys present, and systemd-analyze verify accepts it."""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest

from qwen_ui.settings import Settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
UNIT = DEPLOY / "qwen-ui.service"
ENV_EXAMPLE = DEPLOY / "qwen-ui.env.example"


def unit() -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(UNIT)
    return parser


def test_required_service_keys() -> None:
    service = unit()["Service"]
    expected = {
        "User": "qwen-ui",
        "EnvironmentFile": "/etc/qwen-ui/qwen-ui.env",
        "Restart": "always",
        "RestartSec": "10",
        "StandardOutput": "journal",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "PrivateTmp": "yes",
    }
    for key, value in expected.items():
        assert service[key] == value, key
    assert service["ExecStart"].endswith("qwen-ui serve")


def test_writable_paths_cover_state_and_models() -> None:
    writable = unit()["Service"]["ReadWritePaths"].split()
    env = dict(
        line.split("=", 1)
        for line in ENV_EXAMPLE.read_text().splitlines()
        if line and not line.startswith("#")
    )
    for key in ("QWEN_UI_HOME", "QWEN_UI_MODEL_DIR"):
        assert any(env[key].startswith(path) for path in writable), key


def test_env_example_names_real_settings() -> None:
    names = {"QWEN_UI_" + name.upper() for name in Settings.model_fields}
    for line in ENV_EXAMPLE.read_text().splitlines():
        key = line.lstrip("#").split("=", 1)[0]
        if key.startswith("QWEN_UI_"):
            assert key in names, key


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_analyze_verify(tmp_path: Path) -> None:
    """Verify a copy whose paths exist on this machine (the unit's own ones may not)."""
    venv_bin = Path(shutil.which("python3") or "/usr/bin/python3").parent
    text = UNIT.read_text().replace("/opt/qwen-ui/.venv/bin/qwen-ui", str(venv_bin / "python3"))
    text = text.replace("User=qwen-ui", "User=root").replace("Group=qwen-ui", "Group=root")
    copy = tmp_path / "qwen-ui.service"
    copy.write_text(text)
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(copy)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    complaints = [
        line for line in (result.stdout + result.stderr).splitlines() if str(copy) in line
    ]
    assert result.returncode == 0, result.stderr
    assert not complaints, complaints
