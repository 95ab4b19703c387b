"""Small crash-safe file system operations the store is built from."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path

STALE_AFTER_S = 60.0
"""A temp entry nobody holds a lock on is left alone this long (it may be just created)."""


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new bytes, never a mix:
    temp file in the same directory, fsync, ``os.replace``, fsync the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the lock file ``path`` (created if missing).

    The kernel drops the lock when the process dies, so a crash never leaves it held.
    Lock files are never deleted: deleting one while another process waits on it would
    let two holders in.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)  # flock needs no write
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class TempDir:
    """A directory under ``parent`` that this process holds an ``flock`` on while it lives.

    ``gc`` removes entries of ``parent`` it can lock (their owner is gone) once they are
    older than :data:`STALE_AFTER_S`. Use as a context manager: on exit the directory (and
    whatever is left in it) is removed.
    """

    def __init__(self, parent: Path, prefix: str) -> None:
        parent.mkdir(parents=True, exist_ok=True)
        self.path = parent / f"{prefix}-{secrets.token_hex(8)}"
        self.path.mkdir()
        self._fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __enter__(self) -> TempDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            rmtree(self.path)
            os.close(self._fd)
            self._fd = -1


def is_abandoned(path: Path, now: float | None = None) -> bool:
    """True when nobody holds ``path``'s flock and it is older than :data:`STALE_AFTER_S`."""
    try:
        age = (now or time.time()) - path.lstat().st_mtime
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return False
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a symlink: not ours, but nothing to lock either
            return True
        raise
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return age > STALE_AFTER_S


def seal_tree(top: Path) -> None:
    """Make a freshly written tree durable and read-only: fsync every directory (the files
    were fsynced and made 0444 as they were written), then chmod the directories 0555."""
    for dirpath, _dirs, _files in os.walk(top, topdown=False):
        fsync_dir(Path(dirpath))
        os.chmod(dirpath, 0o555)  # noqa: S103 - read-only for everyone is the point


def rmtree(path: Path) -> None:
    """Remove a tree even where it was made read-only; missing is fine."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(mode):
        path.unlink(missing_ok=True)
        return
    for dirpath, _dirs, _files in os.walk(path):
        with contextlib.suppress(OSError):
            os.chmod(dirpath, 0o700)
    shutil.rmtree(path, ignore_errors=False)


def tree_size(path: Path) -> int:
    """Apparent size of every regular file under ``path``."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total
