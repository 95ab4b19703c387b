"""Gradio's upload folder, made private to whoever uploaded (or was sent) each file.

Gradio keeps every upload in one folder shared by all users (``<folder>/<sha256 of the
bytes>/<name>``) and serves any of them through ``/gradio_api/file=PATH`` once the path is
known. :class:`UploadRegistry` records, in the state store, which principals may read each
path: whoever uploaded it (a principal that uploads the same bytes becomes an owner too),
and whoever the server sent it to (a conversation's images drawn in the chat, an object
fetched from the tenant's OSS prefix: :mod:`qwen_ui.web.gradio_files` records them). The
page's own files (the examples Gradio copied into the folder when the page was built) are
shared with every logged-in principal (:meth:`UploadRegistry.share`). Any other path, in
the folder or outside it, is found for nobody, whether asked through ``file=`` or named in
a value sent to an event.

Files of the folder older than the conversation TTL are deleted by
:meth:`UploadRegistry.sweep` (run periodically by :meth:`UploadRegistry.run_sweeps`; the
page's own files are kept); :meth:`UploadRegistry.forget` drops a principal's uploads when
their conversation ends.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Iterable
from pathlib import Path

from qwen_ui.auth.principal import Principal
from qwen_ui.errors import NotFound
from qwen_ui.state import State

log = logging.getLogger(__name__)


class UploadNotFound(NotFound):
    code = "upload_not_found"
    en = "This uploaded file does not exist (or has expired); attach it again."
    zh = "该上传文件不存在（或已过期），请重新添加。"


class UploadRegistry:
    """Owners of the files in Gradio's upload folder, kept for ``ttl_s`` (plus one sweep
    interval, so that a file is never unowned before the sweep deletes it)."""

    def __init__(self, state: State, folder: Path, ttl_s: float) -> None:
        self.store = state.namespace("upload")
        self.folder = folder.resolve()
        self.ttl_s = ttl_s
        self.public: frozenset[Path] = frozenset()  # the page's own files: everyone's

    @property
    def sweep_interval_s(self) -> float:
        return max(10.0, min(600.0, self.ttl_s / 4))

    def inside(self, path: str | Path) -> Path | None:
        """``path`` resolved, when it lies in the upload folder; else None."""
        try:
            resolved = Path(path).resolve()
        except (OSError, ValueError):
            return None
        return resolved if resolved.is_relative_to(self.folder) else None

    async def record(self, principal: Principal, paths: Iterable[str]) -> None:
        for path in paths:
            resolved = self.inside(path)
            if resolved is None:
                continue
            owners = await self._owners(resolved)
            owners.add(principal.label)
            await self._save(resolved, owners)

    def share(self, paths: Iterable[str]) -> None:
        """Files of the folder that every logged-in principal may read (the page's own)."""
        self.public = self.public | {p for p in map(self.inside, paths) if p is not None}

    async def may_read(self, principal: Principal, path: str | Path) -> bool:
        """Only a file of the folder that ``principal`` uploaded or was sent, or one of the
        page's own; never a path outside the folder."""
        resolved = self.inside(path)
        if resolved is None or not resolved.is_file():
            return False
        if resolved in self.public:
            return True
        return principal.label in await self._owners(resolved)

    async def check(self, principal: Principal, paths: Iterable[str]) -> None:
        """Raise :class:`UploadNotFound` unless ``principal`` may use every path."""
        for path in paths:
            if not await self.may_read(principal, path):
                raise UploadNotFound()

    async def forget(self, principal: Principal, paths: Iterable[str]) -> None:
        """``principal`` is done with these uploads (its conversation was deleted): they
        are no longer its own, and a file nobody else uploaded is deleted."""
        for path in paths:
            resolved = self.inside(path)
            if resolved is None:
                continue
            owners = await self._owners(resolved)
            if principal.label not in owners:
                continue
            owners.discard(principal.label)
            if owners:
                await self._save(resolved, owners)
            else:
                _remove(resolved, self.folder)
                await self.store.delete(_key(resolved))

    def sweep(self, now: float | None = None) -> int:
        """Delete files of the folder last written more than ``ttl_s`` ago (and folders
        left empty); returns how many files went."""
        cutoff = (time.time() if now is None else now) - self.ttl_s
        removed = 0
        if not self.folder.is_dir():
            return 0
        for path in sorted(self.folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            try:
                if path in self.public:
                    continue
                if path.is_file() and path.stat().st_mtime < cutoff:
                    path.unlink()
                    removed += 1
                elif path.is_dir() and not any(path.iterdir()):
                    path.rmdir()
            except OSError:
                continue
        return removed

    async def run_sweeps(self) -> None:
        """Sweep every ``sweep_interval_s`` until cancelled."""
        while True:
            removed = await asyncio.to_thread(self.sweep)
            if removed:
                log.info("deleted %d expired upload(s)", removed)
            await asyncio.sleep(self.sweep_interval_s)

    async def _owners(self, path: Path) -> set[str]:
        raw = await self.store.get(_key(path))
        return set(json.loads(raw)) if raw else set()

    async def _save(self, path: Path, owners: set[str]) -> None:
        value = json.dumps(sorted(owners)).encode()
        await self.store.set(_key(path), value, self.ttl_s + 2 * self.sweep_interval_s)


def _key(path: Path) -> str:
    return hashlib.sha256(str(path).encode()).hexdigest()


def _remove(path: Path, folder: Path) -> None:
    path.unlink(missing_ok=True)
    parent = path.parent
    if parent != folder and parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()
