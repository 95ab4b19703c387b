"""Logging as ``qwen-ui serve`` sets it up: the level reaches every logger, oss2 stays quiet."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import logging
from qwen_ui import logs
logs.configure({level!r})
logging.getLogger("qwen_ui.auth.service").debug("own debug line")
logging.getLogger("urllib3.connectionpool").debug("library debug line")
logging.getLogger("oss2.http").debug("Authorization: OSS4-HMAC-SHA256 leaked")
logging.getLogger("qwen_ui.auth.service").info("own info line")
"""


def run_with(level: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(level=level)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stderr


def test_debug_reaches_qwen_ui_and_library_loggers_but_not_oss2() -> None:
    err = run_with("debug")
    assert "DEBUG qwen_ui.auth.service: own debug line" in err
    assert "DEBUG urllib3.connectionpool: library debug line" in err
    assert "Authorization" not in err
    assert "INFO qwen_ui.auth.service: own info line" in err


def test_info_hides_debug_lines() -> None:
    err = run_with("info")
    assert "debug line" not in err
    assert "own info line" in err
