"""Paths of the store: models/<owner>--<name>/{snapshots,refs}/..."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelStore:
    """A model store rooted at ``root`` (``QWEN_UI_MODEL_DIR``)."""

    root: Path

    def model_dir(self, model_id: str) -> Path:
        owner, name = model_id.split("/", 1)
        return self.root / "models" / f"{owner}--{name}"

    def ref_path(self, model_id: str, revision: str) -> Path:
        return self.model_dir(model_id) / "refs" / revision

    def is_installed(self, model_id: str, revision: str) -> bool:
        """True when a ref for ``revision`` exists (no hashing; cheap)."""
        return self.ref_path(model_id, revision).is_file()
