"""Names and paths of the store (docs/store.md).

Under the store root (``QWEN_UI_MODEL_DIR``, default ``HOME/models``)::

    models/<owner>--<name>/snapshots/<snapshot-id>/...          immutable files
    models/<owner>--<name>/snapshots/<snapshot-id>.manifest.json
    models/<owner>--<name>/refs/<revision>                      text: a snapshot id
    models/.locks/<owner>--<name>.lock                          flock: one writer per model
    models/.tmp/<kind>-<random>/                                installs and removals in progress
    staging/<owner>--<name>/<revision>/                         downloads of cache_model.sh

Everything that is not a model starts with a dot inside ``models/``, so a model directory is
exactly a name with ``--`` in it. The same ``<owner>--<name>`` naming is what ModelScope
(1.38+) uses in its own cache, which ``adopt`` reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from qwen_ui.errors import StoreError

MODEL_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
REVISION_RE = re.compile(r"^\w[\w.-]*$")
SNAPSHOT_ID_RE = re.compile(r"^[0-9a-f]{64}$")
SEPARATOR = "--"
MANIFEST_SUFFIX = ".manifest.json"
DEFAULT_REVISION = "master"


def check_model_id(model_id: str) -> str:
    """``OWNER/NAME``; the owner may not contain ``--`` (it separates owner and name)."""
    if not MODEL_ID_RE.match(model_id) or SEPARATOR in model_id.split("/", 1)[0]:
        raise StoreError(problem=f"{model_id!r} is not a model id of the form OWNER/NAME")
    if model_id.split("/", 1)[1] in {".", ".."}:
        raise StoreError(problem=f"{model_id!r} is not a model id of the form OWNER/NAME")
    return model_id


def check_revision(revision: str) -> str:
    """A branch or tag name: letters, digits, ``_ . -``, not starting with a dot."""
    if not REVISION_RE.match(revision):
        raise StoreError(
            problem=f"{revision!r} is not a revision name (letters, digits, '_', '.', '-')"
        )
    return revision


def dir_name(model_id: str) -> str:
    owner, name = check_model_id(model_id).split("/", 1)
    return f"{owner}{SEPARATOR}{name}"


def model_id_from_dir_name(name: str) -> str | None:
    """The model id of a ``<owner>--<name>`` directory, or None for anything else."""
    owner, sep, rest = name.partition(SEPARATOR)
    if not sep or not rest:
        return None
    model_id = f"{owner}/{rest}"
    return model_id if MODEL_ID_RE.match(model_id) else None


@dataclass(frozen=True)
class Layout:
    """Where things are under one store root. Pure path arithmetic; touches nothing."""

    root: Path

    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def tmp(self) -> Path:
        return self.models / ".tmp"

    @property
    def locks(self) -> Path:
        return self.models / ".locks"

    @property
    def staging(self) -> Path:
        return self.root / "staging"

    def model_dir(self, model_id: str) -> Path:
        return self.models / dir_name(model_id)

    def lock_path(self, model_id: str) -> Path:
        return self.locks / f"{dir_name(model_id)}.lock"

    def refs_dir(self, model_id: str) -> Path:
        return self.model_dir(model_id) / "refs"

    def ref_path(self, model_id: str, revision: str) -> Path:
        return self.refs_dir(model_id) / check_revision(revision)

    def snapshots_dir(self, model_id: str) -> Path:
        return self.model_dir(model_id) / "snapshots"

    def snapshot_dir(self, model_id: str, snapshot_id: str) -> Path:
        return self.snapshots_dir(model_id) / snapshot_id

    def manifest_path(self, model_id: str, snapshot_id: str) -> Path:
        return self.snapshots_dir(model_id) / f"{snapshot_id}{MANIFEST_SUFFIX}"

    def staging_dir(self, model_id: str, revision: str) -> Path:
        return self.staging / dir_name(model_id) / check_revision(revision)
