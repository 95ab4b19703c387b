"""Model references: ``OWNER/NAME@REV``, the name a model is offered, asked and reported by."""

from __future__ import annotations

from dataclasses import dataclass

from qwen_ui.settings import MODEL_REF


@dataclass(frozen=True)
class ModelRef:
    """One installed model revision (a store ref), e.g. ``Qwen/Qwen2.5-VL-7B-Instruct@master``."""

    model_id: str
    revision: str

    def __str__(self) -> str:
        return f"{self.model_id}@{self.revision}"

    @classmethod
    def parse(cls, text: str) -> ModelRef:
        """``OWNER/NAME@REV``; ValueError for anything else."""
        text = text.strip()
        if not MODEL_REF.match(text):
            raise ValueError(f"{text[:200]!r} is not OWNER/NAME@REV")
        model_id, _, revision = text.partition("@")
        return cls(model_id, revision)


def parse_list(text: str) -> list[ModelRef]:
    """Comma-separated refs, duplicates dropped, in order; ValueError on a bad one."""
    refs = [ModelRef.parse(item) for item in text.split(",") if item.strip()]
    return list(dict.fromkeys(refs))
