"""Fetching from ModelScope into the store's staging folder (``qwen-ui models fetch``,
used by ``scripts/cache_model.sh``). Never used by the server: serving stays offline.

:func:`plan` asks ModelScope for the file list with a short timeout (one request, no
retries), so an unreachable hub is reported in seconds rather than after the SDK's retry
loop; it sums the sizes, compares them with the free space of the store's file system and
the listed sha256s with what the store already has. :func:`download` runs the ModelScope
SDK into ``ROOT/staging/<owner>--<name>/<rev>``; a re-run resumes (finished files are kept,
partial ``*.incomplete`` ones continue with HTTP range requests). :func:`fetch_config`
downloads ``config.json`` alone into the same folder first, so that a checkpoint the engine
cannot run is refused before its weights are downloaded (the SDK then keeps that file).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from qwen_ui.errors import FetchError, QwenUIError
from qwen_ui.store import fsutil
from qwen_ui.store.layout import check_model_id, check_revision
from qwen_ui.store.model_store import ModelStore, human_size

DEFAULT_ENDPOINT = "https://modelscope.cn"
EXIT_UP_TO_DATE = 10
EXIT_UNREACHABLE = 3
EXIT_NOT_FOUND = 4
EXIT_NO_SPACE = 5
EXIT_DOWNLOAD_FAILED = 6
EXIT_UNSUPPORTED = 7  # the checkpoint's layout is one the engine cannot run
CONFIG = "config.json"
GiB = 1024**3


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    sha256: str | None


def endpoint_from_env(explicit: str | None = None) -> str:
    """Same precedence as the ModelScope SDK: argument, ``MODELSCOPE_ENDPOINT``, the
    deprecated ``MODELSCOPE_DOMAIN``, then the default; ``https://`` added to bare hosts."""
    value = (
        explicit
        or os.environ.get("MODELSCOPE_ENDPOINT", "").strip()
        or os.environ.get("MODELSCOPE_DOMAIN", "").strip()
        or DEFAULT_ENDPOINT
    )
    if not value.lower().startswith(("http://", "https://")):
        value = f"https://{value}"
    return value.rstrip("/")


def _headers() -> dict[str, str]:
    headers = {"User-Agent": "qwen-ui-cache-model"}
    token = os.environ.get("MODELSCOPE_API_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def list_files(
    endpoint: str, model_id: str, revision: str, timeout: float
) -> list[RemoteFile] | None:
    """The repository's files, or None when the hub answered but not with a listing we
    understand. Raises :class:`FetchError` when the hub cannot be reached or says the model
    or revision does not exist."""
    query = urllib.parse.urlencode({"Revision": revision, "Recursive": "True"})
    url = f"{endpoint}/api/v1/models/{model_id}/repo/files?{query}"
    request = urllib.request.Request(url, headers=_headers())  # noqa: S310 - http(s) only
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            body = response.read()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise FetchError(
                f"ModelScope at {endpoint} has no model {model_id} with revision {revision} "
                "(HTTP 404). Check the model id and revision.",
                EXIT_NOT_FOUND,
            ) from None
        if exc.code in (401, 403):
            raise FetchError(
                f"ModelScope at {endpoint} refused to list {model_id} (HTTP {exc.code}); "
                "for a private model set MODELSCOPE_API_TOKEN.",
                EXIT_NOT_FOUND,
            ) from None
        return None  # answered, so reachable; the download will report its own error
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise FetchError(
            f"cannot reach ModelScope at {endpoint} ({reason}). Check the network, DNS and "
            "proxy settings, or MODELSCOPE_ENDPOINT / --endpoint; or copy the model files "
            "to this host and run: scripts/cache_model.sh --from-dir DIR "
            f"{model_id} {revision}",
            EXIT_UNREACHABLE,
        ) from None
    return parse_listing(body, endpoint, model_id, revision)


def parse_listing(
    body: bytes, endpoint: str, model_id: str, revision: str
) -> list[RemoteFile] | None:
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if isinstance(obj, dict) and obj.get("Code") not in (None, 200) and not obj.get("Data"):
        raise FetchError(
            f"ModelScope at {endpoint} has no model {model_id} with revision {revision}: "
            f"{obj.get('Message') or obj.get('Code')}",
            EXIT_NOT_FOUND,
        )
    data = obj.get("Data", obj) if isinstance(obj, dict) else obj
    entries = data.get("Files") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        return None
    files = []
    try:
        for e in entries:
            if (e.get("Type") or "blob") == "tree":
                continue
            files.append(RemoteFile(str(e["Path"]), int(e["Size"]), e.get("Sha256") or None))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return files


def up_to_date(store: ModelStore, model_id: str, revision: str, files: list[RemoteFile]) -> bool:
    """True when ``revision`` is installed with exactly the listed paths, sizes and sha256s."""
    if not files or any(f.sha256 is None for f in files):
        return False
    try:
        snapshot = store.resolve(model_id, revision)
    except QwenUIError:
        return False
    have = {(e.path, e.size, e.sha256) for e in snapshot.manifest.files}
    return have == {(f.path, f.size, f.sha256) for f in files}


@dataclass(frozen=True)
class Plan:
    endpoint: str
    files: list[RemoteFile] | None  # None: the hub answered, but with no usable listing
    staged: int  # bytes already in the staging folder (an earlier, interrupted run)
    needed: int  # free bytes this download and the install need
    free: int
    up_to_date: bool  # installed, and identical to the listing

    @property
    def total(self) -> int | None:
        return None if self.files is None else sum(f.size for f in self.files)


def plan(
    store: ModelStore,
    model_id: str,
    revision: str,
    endpoint: str,
    timeout: float = 5.0,
    min_free: int = 16 * GiB,
    force: bool = False,
) -> Plan:
    """Ask the hub for the file list (one request, ``timeout`` seconds), then work out the
    space needed: the rest of the download, plus the copy that install makes, plus 2%.
    Without a listing, ``min_free`` is required instead; the space is not required when
    the store already has the listed content, unless ``force``. Raises :class:`FetchError`."""
    check_model_id(model_id)
    check_revision(revision)
    files = list_files(endpoint, model_id, revision, timeout)
    staging = store.layout.staging_dir(model_id, revision)
    staged = fsutil.tree_size(staging) if staging.exists() else 0
    if files is None:
        needed = min_free
    else:
        total = sum(f.size for f in files)
        needed = max(total - staged, 0) + total + total // 50 + 256 * 1024 * 1024
    store.layout.models.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(store.layout.models).free
    current = files is not None and up_to_date(store, model_id, revision, files)
    result = Plan(endpoint, files, staged, needed, free, current)
    if (force or not current) and free < needed:
        raise FetchError(
            f"not enough free space on the file system of {store.root}: need "
            f"{human_size(needed)} (the download into staging, then the copy into the "
            f"store), {human_size(free)} free. Free some space, or point QWEN_UI_MODEL_DIR "
            "at a larger disk (docs/store.md: the ESSD data disk).",
            EXIT_NO_SPACE,
        )
    return result


def fetch_config(
    store: ModelStore, model_id: str, revision: str, endpoint: str, timeout: float = 30.0
) -> dict[str, object] | None:
    """The repository's ``config.json``, downloaded alone into the staging folder (kept
    there: the SDK's download then skips it), or None when the hub has none or does not
    answer with one (the install's own check still runs). An earlier run's copy is reused."""
    staged = store.layout.staging_dir(model_id, revision) / CONFIG
    if not staged.is_file():
        query = urllib.parse.urlencode({"Revision": revision, "FilePath": CONFIG})
        url = f"{endpoint}/api/v1/models/{model_id}/repo?{query}"
        request = urllib.request.Request(url, headers=_headers())  # noqa: S310 - http(s) only
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
                body = response.read()
        except (urllib.error.URLError, OSError):
            return None
        staged.parent.mkdir(parents=True, exist_ok=True)
        fsutil.atomic_write(staged, body)
    try:
        config = json.loads(staged.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or not ({"model_type", "architectures"} & set(config)):
        return None  # not a model config (a hub's error body, say): install checks the files
    return config


def download(store: ModelStore, model_id: str, revision: str, endpoint: str) -> Path:
    """Download with the ModelScope SDK into the staging folder; a re-run resumes."""
    staging = store.layout.staging_dir(model_id, revision)
    staging.mkdir(parents=True, exist_ok=True)
    from modelscope import snapshot_download

    try:
        path = snapshot_download(
            model_id,
            revision=revision,
            local_dir=str(staging),
            cache_dir=str(store.layout.staging / ".modelscope"),  # its locks and resume state
            endpoint=endpoint,
        )
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise FetchError(
                f"the disk of {store.root} filled up during the download; free space and "
                "re-run the same command to resume",
                EXIT_NO_SPACE,
            ) from exc
        raise FetchError(_failed(endpoint, exc), EXIT_DOWNLOAD_FAILED) from exc
    except Exception as exc:  # the SDK's own errors: network, integrity, permissions
        raise FetchError(_failed(endpoint, exc), EXIT_DOWNLOAD_FAILED) from exc
    return Path(path)


def _failed(endpoint: str, exc: BaseException) -> str:
    return (
        f"the download from ModelScope at {endpoint} failed: {type(exc).__name__}: {exc}. "
        "Re-run the same command to resume; finished files are kept."
    )
