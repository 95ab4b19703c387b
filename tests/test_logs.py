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
import qwen_ui.services  # imports oss2, which sets aliyunsdkcore's logger to DEBUG
logs.quiet_oss2_logging()  # as Services.start does
logging.getLogger("aliyunsdkcore.http.http_response").debug("Authorization: acs leaked")
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


LIBRARY_SCRIPT = """
import logging, sys
from qwen_ui import logs
printing = logging.getLogger("printinglib")  # prints its lines and passes them on
printing.addHandler(logging.StreamHandler())
chatty = logging.getLogger("chattylib")  # sets itself lower than the configured level
chatty.setLevel(logging.DEBUG)
logs.configure("info")
later = logging.getLogger("laterlib.sub")  # imported after configure, as Gradio's are
later.addHandler(logging.StreamHandler(sys.stdout))
logs.one_line_each()
printing.warning("printing line")
later.warning("later line")
chatty.debug("chatty debug line")
"""


def test_library_lines_are_written_once_at_the_configured_level() -> None:
    done = subprocess.run(
        [sys.executable, "-c", LIBRARY_SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    output = done.stdout + done.stderr
    for line in ("WARNING printinglib: printing line", "WARNING laterlib.sub: later line"):
        assert output.count(line.rsplit(": ", 1)[1]) == 1 and line in output, output
    assert "chatty debug line" not in output
