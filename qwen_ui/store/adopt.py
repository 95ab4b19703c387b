"""Finding the models in an existing download, for ``qwen-ui models adopt DIR``.

Accepted shapes of ``DIR``:

* a ModelScope cache root (``MODELSCOPE_CACHE``, 1.38+ layout): ``models/<owner>--<name>/
  snapshots/<revision>/`` — every model and revision in it (or the one asked for);
* one model folder of such a cache, ``.../models/<owner>--<name>`` (with ``snapshots/``);
  a folder that also has ``refs/`` (a qwen-ui store, or a Hugging Face-style cache) is read
  through its refs, so the revisions keep their names;
* one revision folder, ``.../<owner>--<name>/snapshots/<revision>``;
* anything else is taken as a ``modelscope download --local-dir`` folder: the files are the
  model; ``--model-id`` is required and ``--revision`` defaults to ``master``.
"""

from __future__ import annotations

from pathlib import Path

from qwen_ui.errors import StoreError
from qwen_ui.store.layout import (
    DEFAULT_REVISION,
    check_model_id,
    check_revision,
    model_id_from_dir_name,
)

Source = tuple[Path, str, str]  # (folder to install, model id, revision)


def find(directory: Path, model_id: str | None, revision: str | None) -> list[Source]:
    if model_id is not None:
        check_model_id(model_id)
    if revision is not None:
        check_revision(revision)
    if not directory.is_dir():
        raise StoreError(problem=f"{directory} is not a directory")

    if (directory / "snapshots").is_dir():
        found = _model_folder(directory, model_id or _id_of(directory))
    elif (directory / "models").is_dir() and any(_model_folders(directory / "models")):
        found = [
            src
            for folder in _model_folders(directory / "models")
            if model_id is None or _id_of(folder) == model_id
            for src in _model_folder(folder, _id_of(folder))
        ]
        if not found:
            what = model_id or "any model"
            raise StoreError(problem=f"{directory} holds no snapshot of {what}")
    elif directory.parent.name == "snapshots" and model_id_from_dir_name(
        directory.parent.parent.name
    ):
        found = [(directory, model_id or _id_of(directory.parent.parent), directory.name)]
    else:
        if model_id is None:
            raise StoreError(
                problem=f"{directory} is a plain folder of model files (a --local-dir "
                "download): pass --model-id OWNER/NAME (and --revision, default master)"
            )
        return [(directory, model_id, revision or DEFAULT_REVISION)]

    if revision is not None:
        found = [src for src in found if src[2] == revision]
        if not found:
            raise StoreError(problem=f"{directory} holds no revision {revision!r}")
    for _src, _mid, rev in found:
        check_revision(rev)
    return found


def _id_of(folder: Path) -> str:
    model_id = model_id_from_dir_name(folder.name)
    if model_id is None:
        raise StoreError(
            problem=f"cannot tell the model id from the folder name {folder.name!r}; "
            "pass --model-id OWNER/NAME"
        )
    return model_id


def _model_folders(models: Path) -> list[Path]:
    return sorted(
        p
        for p in models.iterdir()
        if p.is_dir() and model_id_from_dir_name(p.name) and (p / "snapshots").is_dir()
    )


def _model_folder(folder: Path, model_id: str) -> list[Source]:
    """The revisions of one ``<owner>--<name>`` folder."""
    snapshots = folder / "snapshots"
    refs = folder / "refs"
    found: list[Source] = []
    if refs.is_dir():
        for ref in sorted(p for p in refs.iterdir() if p.is_file() and not p.name.startswith(".")):
            name = ref.read_text("utf-8", errors="replace").strip()
            valid = name and "/" not in name and name not in {".", ".."}
            if valid and (snapshots / name).is_dir():
                found.append((snapshots / name, model_id, ref.name))
    if not found:
        found = [
            (p, model_id, p.name)
            for p in sorted(snapshots.iterdir())
            if p.is_dir() and not p.name.startswith(".")
        ]
    if not found:
        raise StoreError(problem=f"{snapshots} holds no snapshot")
    return found
