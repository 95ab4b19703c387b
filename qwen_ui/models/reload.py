"""Re-reading the model list while serving: ``SIGHUP`` and ``POST /admin/models/reload``.

With ``QWEN_UI_SETTINGS_FILE`` (e.g. the systemd ``EnvironmentFile``) and the local
engine, the file's model list replaces the served one: ``QWEN_UI_MODELS``, else
``QWEN_UI_MODEL_ID`` and ``QWEN_UI_MODEL_REVISION``. The file wins over the process
environment, which still holds the values of the start. Without the file the same models
are kept. Either way every store ref is read again, so a ref moved by ``qwen-ui models
install`` or ``scripts/cache_model.sh`` is served from its new snapshot. Other settings in
the file take a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from pathlib import Path
from typing import Any

from dotenv import dotenv_values
from pydantic import ValidationError

from qwen_ui.errors import QwenUIError
from qwen_ui.models.errors import SwitchRefused
from qwen_ui.models.registry import ModelRegistry
from qwen_ui.settings import ENV_PREFIX, Settings

log = logging.getLogger(__name__)

_KEYS = {"models": "MODELS", "model_id": "MODEL_ID", "model_revision": "MODEL_REVISION"}


def models_in_file(path: Path) -> tuple[str, ...]:
    """The model list a settings file names (validated as the settings are)."""
    values = dotenv_values(path)
    found = {name: values.get(ENV_PREFIX + key) for name, key in _KEYS.items()}
    given = {name: value for name, value in found.items() if value}
    given.setdefault("models", "")  # the start's QWEN_UI_MODELS must not win over the file
    try:
        return Settings(**given).model_refs  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise SwitchRefused(reason=f"{path}: {problems}") from None


async def reload_models(settings: Settings, registry: ModelRegistry) -> dict[str, Any]:
    """Offer the settings file's models (or the same ones), every ref read again."""
    names = None
    if settings.settings_file is not None and not registry.remote:
        names = await asyncio.to_thread(models_in_file, settings.settings_file)
    return await registry.reload(names)


def on_sighup(settings: Settings, registry: ModelRegistry) -> bool:
    """Reload on SIGHUP (main thread of a Unix event loop only); True when installed."""
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()

    def hangup() -> None:
        task = loop.create_task(_reload_logged(settings, registry))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    try:
        loop.add_signal_handler(signal.SIGHUP, hangup)
    except (ValueError, RuntimeError, NotImplementedError, AttributeError):
        log.debug("SIGHUP handler not installed (not the main thread's loop)")
        return False
    return True


def off_sighup() -> None:
    with contextlib.suppress(ValueError, RuntimeError, NotImplementedError, AttributeError):
        asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)


async def _reload_logged(settings: Settings, registry: ModelRegistry) -> None:
    log.info("SIGHUP: reading the model list again")
    try:
        await reload_models(settings, registry)
    except QwenUIError as exc:  # keep serving what is served
        log.error("SIGHUP reload failed: %s", exc.message("en"))
    except Exception:
        log.exception("SIGHUP reload failed")
