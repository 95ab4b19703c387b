"""The hash-addressed model store (docs/store.md).

The engine loads models only through :meth:`ModelStore.resolve`, which returns a local
:class:`Snapshot` path; nothing here touches the network (``scripts/cache_model.sh`` and
:mod:`qwen_ui.store.fetch` do the downloading).
"""

from qwen_ui.store.layout import DEFAULT_REVISION
from qwen_ui.store.manifest import FileEntry, Manifest
from qwen_ui.store.model_store import (
    Entry,
    GcReport,
    InstallReport,
    ModelStore,
    Snapshot,
    install_command,
)

__all__ = [
    "DEFAULT_REVISION",
    "Entry",
    "FileEntry",
    "GcReport",
    "InstallReport",
    "Manifest",
    "ModelStore",
    "Snapshot",
    "install_command",
]
