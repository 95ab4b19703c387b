"""The hash-addressed model store (see DESIGN.md, "Model store")."""

from qwen_ui.store.layout import ModelStore

__all__ = ["ModelStore"]
