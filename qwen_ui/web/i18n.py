"""The UI's way to its words: the one zh/en table is :mod:`qwen_ui.texts` (shared with the
engine's stage labels), the language :mod:`qwen_ui.lang`'s; both are re-exported here."""

from __future__ import annotations

from qwen_ui.lang import LANGS, Lang, negotiate
from qwen_ui.texts import TEXT, t

__all__ = ["LANGS", "TEXT", "Lang", "negotiate", "t"]
