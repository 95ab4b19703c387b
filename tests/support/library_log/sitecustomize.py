"""Imported by Python at start-up in a server that a test starts with this folder on
PYTHONPATH: SIGUSR1 makes the process write one line through huggingface_hub's logger, as
the library itself would (it gives its root logger a console handler of its own when it is
imported, which Gradio does). The line is ``LINE`` followed by the signal's count."""

from __future__ import annotations

import itertools
import logging
import signal
from types import FrameType

LINE = "library line from huggingface_hub"
_count = itertools.count(1)


def _log(signum: int, frame: FrameType | None) -> None:
    logging.getLogger("huggingface_hub.test").warning("%s %d", LINE, next(_count))


signal.signal(signal.SIGUSR1, _log)
