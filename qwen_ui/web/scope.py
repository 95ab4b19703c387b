"""The served model's scope: what it understands, in its own words, as the model declares
it in the facts file beside its weights (``qwen_ui.json``)::

    {"scope": {"en": "Understands questions about …", "zh": "能回答关于……的问题"}}

The page shows it beside the examples, in the page's language, for the model that is the
default when the page is loaded (it follows ``qwen-ui models activate`` and ``SIGHUP``), and
under the model picker for the picked one. Models that declare none (production Qwen
models, any remote engine) get no note.
"""

from __future__ import annotations

import logging
from pathlib import Path

from qwen_ui.demo.install import weights_dir
from qwen_ui.engine.facts import DECLARED, read_declared
from qwen_ui.errors import QwenUIError
from qwen_ui.lang import Lang
from qwen_ui.models.refs import ModelRef
from qwen_ui.settings import DEMO_MODEL_ID, Settings
from qwen_ui.store import ModelStore

log = logging.getLogger(__name__)


def declared_scope(settings: Settings) -> dict[Lang, str] | None:
    """The scope the served model declares, in both languages; None when it declares
    none (or its facts file cannot be read)."""
    folder = _model_folder(settings)
    if folder is None:
        return None
    try:
        return read_declared(folder).scope
    except (OSError, ValueError) as exc:
        log.warning("cannot read %s of %s: %s", DECLARED, settings.model_id, exc)
        return None


def model_scope(settings: Settings, model: str) -> dict[Lang, str] | None:
    """The scope ``model`` (``OWNER/NAME@REV``, one of the offered models) declares; None
    when it declares none or is no such name (a remote model's)."""
    try:
        ref = ModelRef.parse(model)
    except ValueError:
        return None
    update = {"model_id": ref.model_id, "model_revision": ref.revision, "models": ""}
    return declared_scope(settings.model_copy(update=update))


def is_demo(model: str) -> bool:
    """Whether ``model`` (``OWNER/NAME@REV``) is the shipped demo model."""
    return model.partition("@")[0] == DEMO_MODEL_ID


def _model_folder(settings: Settings) -> Path | None:
    """The served model's files: its snapshot in the store, or for the shipped demo model
    not yet installed, the package copy that the first request will install."""
    if settings.engine != "local":
        return None
    try:
        return Path(
            ModelStore(settings.model_path).resolve(settings.model_id, settings.model_revision).path
        )
    except QwenUIError:
        if settings.is_demo_model:
            return weights_dir(settings.model_revision)
        return None
