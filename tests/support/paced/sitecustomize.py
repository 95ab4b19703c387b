"""Imported by Python at start-up in a server that ``tests.support.server`` starts with this
folder on PYTHONPATH: after every step of the engine's batch the worker pauses
``QWEN_UI_TEST_STEP_S`` seconds, so the tiny random model writes at the pace of a real one
(tens of tokens a second) and a browser test can press Stop while an answer streams,
without the engine taking a whole core from the browser."""

from __future__ import annotations

import os
import time

PAUSE_S = float(os.environ.get("QWEN_UI_TEST_STEP_S", "0"))

if PAUSE_S > 0:
    from qwen_ui.engine import batching

    _step = batching.Batch.step

    def _paced(self: batching.Batch) -> None:  # type: ignore[type-arg]
        _step(self)
        time.sleep(PAUSE_S)

    batching.Batch.step = _paced  # type: ignore[method-assign]
