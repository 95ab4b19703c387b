"""Install the shipped demo model (``qwen-ui/shapes-vl-demo``) into the model store.

Both revisions live in the package under ``qwen_ui/demo/weights/<revision>``; installing
copies them into the hash-addressed store like any other model, so serving resolves the
demo exactly as it would resolve a production model. Idempotent: identical content that is
already installed is left alone.

:class:`DemoInstallingStore` is the one place that installs the demo while serving: the
app's store, which installs the shipped demo on first resolve when it is missing.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from qwen_ui.demo import WEIGHTS
from qwen_ui.errors import ModelNotInstalled
from qwen_ui.settings import DEMO_MODEL_ID
from qwen_ui.store import ModelStore, Snapshot

log = logging.getLogger(__name__)

REVISIONS = ("bf16", "awq")


def weights_dir(revision: str) -> Path:
    return WEIGHTS / revision


def shipped_revisions() -> list[str]:
    """Revisions whose weights are present in this installation of the package."""
    return [r for r in REVISIONS if any(weights_dir(r).glob("*.safetensors"))]


def install_demo(store: Any, revisions: tuple[str, ...] = REVISIONS) -> dict[str, Any]:
    """Install the given revisions into ``store`` (a ``ModelStore``); returns the
    snapshots by revision. Revisions missing from the package are skipped."""
    present = set(shipped_revisions())
    snapshots = {}
    for revision in revisions:
        if revision not in present:
            log.warning("demo revision %s is not in the package; skipped", revision)
            continue
        snapshots[revision] = store.install(weights_dir(revision), DEMO_MODEL_ID, revision)
        log.info("installed %s@%s as %s", DEMO_MODEL_ID, revision, snapshots[revision].id[:12])
    return snapshots


def ensure_demo(store: Any, revision: str) -> bool:
    """Install the demo revision unless the store already has it; True when installed now.

    For ``qwen-ui serve`` on first run with the embedded default model."""
    if store.is_installed(DEMO_MODEL_ID, revision):
        return False
    install_demo(store, tuple(dict.fromkeys((revision, *REVISIONS))))
    return True


class DemoInstallingStore(ModelStore):
    """The app's store, except that resolving the shipped demo model installs it first
    when missing (first question on a fresh home, or ``qwen-ui serve`` at start: a local
    copy and hash, well under a second). Every other model must be installed by the
    operator."""

    def resolve(self, model_id: str, revision: str) -> Snapshot:
        try:
            return super().resolve(model_id, revision)
        except ModelNotInstalled:
            if model_id != DEMO_MODEL_ID:
                raise
        if ensure_demo(self, revision):
            log.info("installed the shipped demo model %s@%s", model_id, revision)
        return super().resolve(model_id, revision)
