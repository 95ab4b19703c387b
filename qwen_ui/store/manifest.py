"""The manifest of a snapshot, its canonical bytes and id, and fast file hashing.

A manifest lists every file of a snapshot (relative POSIX path, size, sha256), sorted by
path. Its canonical form is compact JSON with sorted keys, ASCII only; the snapshot id is
the sha256 of exactly those bytes, and the manifest file on disk holds exactly those bytes,
so ``sha256(manifest file) == snapshot id`` can be checked without touching the model files.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from qwen_ui.errors import ManifestError

FORMAT = 1
CHUNK = 8 * 1024 * 1024  # measured: 1-16 MiB all hash at the same speed; 8 MiB keeps syscalls few

Progress = Callable[[int], None]
"""Called from worker threads with a number of bytes just processed."""


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative, POSIX separators
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    files: tuple[FileEntry, ...]

    @classmethod
    def of(cls, entries: Iterable[FileEntry]) -> Manifest:
        files = tuple(sorted(entries, key=lambda e: e.path))
        for entry in files:
            check_relative_path(entry.path)
        paths = [e.path for e in files]
        if len(set(paths)) != len(paths):
            raise ManifestError(problem="duplicate paths in manifest")
        return cls(files)

    @property
    def total_size(self) -> int:
        return sum(e.size for e in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "files": [{"path": e.path, "size": e.size, "sha256": e.sha256} for e in self.files],
        }

    def canonical_bytes(self) -> bytes:
        return json.dumps(
            self.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=True
        ).encode("ascii")

    @property
    def snapshot_id(self) -> str:
        return hashlib.sha256(self.canonical_bytes()).hexdigest()

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        try:
            obj = json.loads(data)
            if obj.get("format") != FORMAT:
                raise ManifestError(problem=f"unknown manifest format {obj.get('format')!r}")
            entries = [
                FileEntry(str(f["path"]), int(f["size"]), str(f["sha256"])) for f in obj["files"]
            ]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ManifestError(problem=f"unreadable manifest: {exc}") from exc
        return cls.of(entries)


def check_relative_path(path: str) -> str:
    """Refuse anything that could point outside the snapshot directory."""
    pure = PurePosixPath(path)
    if (
        not path
        or pure.is_absolute()
        or "\\" in path
        or any(part in {"", ".", ".."} for part in path.split("/"))
    ):
        raise ManifestError(problem=f"bad path in manifest: {path!r}")
    return path


def hash_file(path: Path, progress: Progress | None = None) -> tuple[int, str]:
    """(size, sha256) of one file, read in large chunks (hashlib releases the GIL)."""
    digest = hashlib.sha256()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    size = 0
    with open(path, "rb", buffering=0) as f:
        prefetch = _Prefetch(f.fileno())
        while n := f.readinto(buf):
            size += n
            prefetch.past(size)
            digest.update(view[:n])
            if progress:
                progress(n)
    return size, digest.hexdigest()


def copy_and_hash(src: Path, dst: Path, progress: Progress | None = None) -> tuple[int, str]:
    """Copy ``src`` to a new file ``dst`` (fsynced, made read-only), hashing what was written."""
    digest = hashlib.sha256()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    size = 0
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(src, "rb", buffering=0) as fin:
        prefetch = _Prefetch(fin.fileno())
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            while n := fin.readinto(buf):
                prefetch.past(size + n)
                chunk = view[:n]
                digest.update(chunk)
                written = 0
                while written < n:
                    written += os.write(fd, chunk[written:])
                size += n
                if progress:
                    progress(n)
            os.fsync(fd)
            os.fchmod(fd, 0o444)
        finally:
            os.close(fd)
    return size, digest.hexdigest()


def parallel_map(
    fn: Callable[[Any], Any], items: Sequence[Any], sizes: Sequence[int], workers: int | None = None
) -> list[Any]:
    """``[fn(item) ...]`` in a thread pool, largest items first, results in input order."""
    if not items:
        return []
    workers = workers or min(len(items), max(4, os.cpu_count() or 1))
    order = sorted(range(len(items)), key=lambda i: sizes[i], reverse=True)
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="qwen-ui-hash")
    try:
        futures = {i: pool.submit(fn, items[i]) for i in order}
        return [futures[i].result() for i in range(len(items))]
    finally:
        # on an error or Ctrl-C, files not started yet are dropped rather than waited for
        pool.shutdown(wait=True, cancel_futures=True)


class _Prefetch:
    """Keep the disk busy while the CPU hashes: after each chunk is read, ask the kernel to
    start reading the next one (``POSIX_FADV_WILLNEED`` returns without waiting), so a
    high-latency disk (a cloud disk) is not idle while a chunk is being hashed."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.enabled = hasattr(os, "posix_fadvise")
        if self.enabled:
            with contextlib.suppress(OSError):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
                os.posix_fadvise(fd, 0, CHUNK, os.POSIX_FADV_WILLNEED)

    def past(self, offset: int) -> None:
        """Bytes up to ``offset`` have been read; start on the chunk after them."""
        if self.enabled:
            with contextlib.suppress(OSError):
                os.posix_fadvise(self.fd, offset, CHUNK, os.POSIX_FADV_WILLNEED)
