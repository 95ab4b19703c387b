"""``qwen-ui`` whose local model says a fixed answer: a real server process for browser
tests of what the page does with an answer the shipped demo model cannot give yet (boxes).

``python -m tests.support.forced_answer serve ...`` with ``QWEN_UI_TEST_ANSWER`` set: every
question is answered with that text, streamed token by token through the engine's own
detokenizing, box parsing and events (:func:`tests.engine.support.force_answer`); the
model, its processor and everything before generation run for real.
"""

from __future__ import annotations

import os
import sys

import pytest

from qwen_ui.cli import main as cli_main
from qwen_ui.engine.engine import Engine
from tests.engine.support import force_answer

ANSWER_ENV = "QWEN_UI_TEST_ANSWER"


def command() -> list[str]:
    """The command that replaces ``python -m qwen_ui.cli`` in ``ServerProcess``."""
    return [sys.executable, "-m", "tests.support.forced_answer"]


def main() -> int:
    text = os.environ[ANSWER_ENV]
    patch = pytest.MonkeyPatch()
    start = Engine.start

    def forced_start(engine: Engine) -> None:
        force_answer(patch, engine, text)
        start(engine)

    patch.setattr(Engine, "start", forced_start)
    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
