"""Where the training scripts live, for tests that run them as their command line would."""

from __future__ import annotations

from pathlib import Path

TRAINING = Path(__file__).resolve().parents[1]
