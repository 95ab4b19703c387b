"""The server key: from the environment or a 0600 key file created on first run."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr

from qwen_ui.auth.errors import ServerKeyError
from qwen_ui.auth.keys import keys_from_text, load_server_keys
from qwen_ui.settings import Settings


def test_key_file_created_0600_and_reused(home: Path) -> None:
    settings = Settings(home=home)
    first = load_server_keys(settings)
    path = settings.key_path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    again = load_server_keys(settings)
    assert again.decrypt(first.encrypt("x")) == "x"
    assert again.mac("p", "a") == first.mac("p", "a")


def test_readable_key_file_is_refused(home: Path) -> None:
    settings = Settings(home=home)
    load_server_keys(settings)
    settings.key_path.chmod(0o644)
    with pytest.raises(ServerKeyError, match="chmod 600"):
        load_server_keys(settings)


def test_key_from_settings_wins_and_rotates(home: Path) -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    before = load_server_keys(Settings(home=home, secret_key=SecretStr(old)))
    sealed = before.encrypt("secret")
    after = load_server_keys(Settings(home=home, secret_key=SecretStr(f"{new}, {old}")))
    assert after.decrypt(sealed) == "secret"
    assert not Settings(home=home).key_path.exists()


def test_bad_keys() -> None:
    for text in ("", "short", "a,b"):
        with pytest.raises(ServerKeyError):
            keys_from_text(text)


def test_macs_are_purpose_bound() -> None:
    keys = keys_from_text(Fernet.generate_key().decode())
    assert keys.mac("a", "x", "y") != keys.mac("b", "x", "y")
    assert keys.mac("a", "xy", "") != keys.mac("a", "x", "y")
    assert keys.decrypt("not a token") is None
