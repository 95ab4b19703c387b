"""The hash-addressed model store: install, resolve, verify, list, gc, remove, adopt.

Invariants (see :mod:`qwen_ui.store.layout` for the paths):

* A snapshot directory and its manifest never change after they appear; files are 0444
  and directories 0555.
* A ref names a snapshot whose directory and manifest were both renamed into place and
  fsynced before the ref was written; refs are replaced atomically, so a reader sees the
  old or the new snapshot id, never a partial one.
* Writers (install, gc, remove) take the model's lock; readers (resolve, verify, list)
  take no lock.
* Work in progress lives in ``models/.tmp`` in directories their owner holds an flock on;
  a crash leaves at worst an unlocked directory there, which ``gc`` removes.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import logging
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from qwen_ui.errors import ManifestError, ModelCorrupt, ModelNotInstalled, StoreError
from qwen_ui.settings import DEMO_MODEL_ID
from qwen_ui.store import fsutil
from qwen_ui.store.layout import (
    DEFAULT_REVISION,
    MANIFEST_SUFFIX,
    SNAPSHOT_ID_RE,
    Layout,
    check_model_id,
    check_revision,
    model_id_from_dir_name,
)
from qwen_ui.store.manifest import (
    FileEntry,
    Manifest,
    copy_and_hash,
    hash_file,
    parallel_map,
)

log = logging.getLogger(__name__)

# Bookkeeping that ModelScope, git or an interrupted download leave in a model folder;
# never part of a snapshot.
SKIP_NAMES = frozenset({".git", ".cache", ".lock", "._____temp", ".msc", ".mv", ".mdl"})
# files a ModelScope (or Hugging Face) download is still writing
PARTIAL_SUFFIXES = (".incomplete", ".parallel_tmp")
FREE_SPACE_MARGIN = 64 * 1024 * 1024

ProgressFn = Callable[[int, int], None]
"""``progress(done_bytes, total_bytes)``, called from worker threads."""


@dataclass(frozen=True)
class Snapshot:
    """An installed, immutable set of model files."""

    path: Path
    id: str
    manifest: Manifest

    @property
    def short_id(self) -> str:
        return self.id[:12]


@dataclass(frozen=True)
class InstallReport:
    model_id: str
    revision: str
    snapshot: Snapshot
    previous_id: str | None
    changed: bool  # False: the ref already named identical, intact content
    repaired: bool  # an existing snapshot with this id was damaged and has been replaced
    seconds: float


@dataclass(frozen=True)
class Entry:
    """One row of :meth:`ModelStore.list`: a ref, or a snapshot no ref points to."""

    model_id: str
    revision: str | None  # None: unreferenced (``gc`` removes it)
    snapshot_id: str
    size: int | None  # None: the manifest is missing or unreadable
    files: int | None
    installed_at: float  # ref (or manifest) mtime, seconds since the epoch


@dataclass(frozen=True)
class GcReport:
    snapshots: list[tuple[str, str]]  # (model id, snapshot id)
    temp_entries: list[Path]
    freed_bytes: int


def install_command(model_id: str, revision: str) -> str:
    """The command that installs ``model_id@revision``, for error messages."""
    if model_id == DEMO_MODEL_ID:
        return "qwen-ui models install-demo"
    return (
        f"scripts/cache_model.sh {model_id} {revision} (downloads from ModelScope), or "
        f"qwen-ui models install DIR --model-id {model_id} --revision {revision}"
    )


class ModelStore:
    """A model store rooted at ``root`` (``QWEN_UI_MODEL_DIR``)."""

    def __init__(self, root: Path | str, workers: int | None = None) -> None:
        self.root = Path(root).expanduser()
        self.layout = Layout(self.root)
        self.workers = workers

    def __repr__(self) -> str:
        return f"ModelStore({str(self.root)!r})"

    # --- paths (kept for callers of the first version) -------------------------------

    def model_dir(self, model_id: str) -> Path:
        return self.layout.model_dir(model_id)

    def ref_path(self, model_id: str, revision: str) -> Path:
        return self.layout.ref_path(model_id, revision)

    def is_installed(self, model_id: str, revision: str) -> bool:
        """True when a ref for ``revision`` exists (no hashing, no size checks)."""
        try:
            return self.layout.ref_path(model_id, revision).is_file()
        except StoreError:
            return False

    # --- reading --------------------------------------------------------------------

    def read_ref(self, model_id: str, revision: str) -> str:
        """The snapshot id ``revision`` names; :class:`ModelNotInstalled` when there is none."""
        path = self.layout.ref_path(model_id, revision)
        try:
            text = path.read_text("ascii").strip()
        except FileNotFoundError:
            raise ModelNotInstalled(
                model_id=model_id, revision=revision, command=install_command(model_id, revision)
            ) from None
        except (UnicodeDecodeError, IsADirectoryError):
            text = ""
        if not SNAPSHOT_ID_RE.match(text):
            raise ModelCorrupt(
                model_id=model_id,
                problem="the ref does not hold a snapshot id",
                path=f"refs/{revision}",
                file=str(path),
            )
        return text

    def revisions(self, model_id: str) -> builtins.list[str]:
        refs = self.layout.refs_dir(model_id)
        try:
            names = sorted(p.name for p in refs.iterdir() if not p.name.startswith("."))
        except FileNotFoundError:
            return []
        return names

    def models(self) -> builtins.list[str]:
        """Ids of every model with a directory in the store."""
        try:
            dirs = sorted(self.layout.models.iterdir())
        except FileNotFoundError:
            return []
        ids = (model_id_from_dir_name(d.name) for d in dirs if d.is_dir())
        return [i for i in ids if i]

    def load_snapshot(self, model_id: str, snapshot_id: str) -> Snapshot:
        """The snapshot's manifest, checked against its id (no model file is touched)."""
        manifest_path = self.layout.manifest_path(model_id, snapshot_id)
        rel = f"snapshots/{manifest_path.name}"
        try:
            data = manifest_path.read_bytes()
        except FileNotFoundError:
            raise ModelCorrupt(
                model_id=model_id,
                problem="the manifest is missing",
                path=rel,
                file=str(manifest_path),
            ) from None
        if hashlib.sha256(data).hexdigest() != snapshot_id:
            raise ModelCorrupt(
                model_id=model_id,
                problem="the manifest does not match the snapshot id",
                path=rel,
                file=str(manifest_path),
            )
        try:
            manifest = Manifest.from_bytes(data)
        except ManifestError as exc:
            raise ModelCorrupt(
                model_id=model_id, problem=exc.params["problem"], path=rel, file=str(manifest_path)
            ) from None
        return Snapshot(self.layout.snapshot_dir(model_id, snapshot_id), snapshot_id, manifest)

    def resolve(self, model_id: str, revision: str) -> Snapshot:
        """The snapshot ``revision`` names, after checking every file's size (no hashing).

        Raises :class:`ModelNotInstalled` (the message names the install command) or
        :class:`ModelCorrupt` (naming the first missing or wrong-sized file).
        """
        check_model_id(model_id)
        snapshot = self.load_snapshot(model_id, self.read_ref(model_id, revision))
        self._check_sizes(model_id, snapshot)
        return snapshot

    def verify(self, model_id: str, revision: str, full: bool = False) -> Snapshot:
        """Like :meth:`resolve`, plus: no file outside the manifest, and with ``full``, every
        file's sha256. Raises :class:`ModelCorrupt` naming the first bad file in manifest
        order."""
        snapshot = self.resolve(model_id, revision)
        self._check_no_extra_files(model_id, snapshot)
        if full:
            self._check_hashes(model_id, snapshot)
        return snapshot

    def list(self) -> builtins.list[Entry]:
        """Every ref of every model, then the snapshots no ref points to."""
        entries: list[Entry] = []
        for model_id in self.models():
            referenced = set()
            for revision in self.revisions(model_id):
                ref = self.layout.ref_path(model_id, revision)
                try:
                    snapshot_id = self.read_ref(model_id, revision)
                    mtime = ref.stat().st_mtime
                except (ModelCorrupt, ModelNotInstalled, OSError):
                    continue
                referenced.add(snapshot_id)
                entries.append(self._entry(model_id, revision, snapshot_id, mtime))
            for snapshot_id, manifest_path in self._snapshot_ids(model_id).items():
                if snapshot_id not in referenced and manifest_path is not None:
                    with contextlib.suppress(OSError):
                        mtime = manifest_path.stat().st_mtime
                        entries.append(self._entry(model_id, None, snapshot_id, mtime))
        return entries

    # --- writing --------------------------------------------------------------------

    def install(
        self,
        src_dir: Path | str,
        model_id: str,
        revision: str = DEFAULT_REVISION,
        progress: ProgressFn | None = None,
    ) -> Snapshot:
        """Copy ``src_dir`` into the store as ``model_id@revision``; see :meth:`install_report`."""
        return self.install_report(src_dir, model_id, revision, progress).snapshot

    def install_report(
        self,
        src_dir: Path | str,
        model_id: str,
        revision: str = DEFAULT_REVISION,
        progress: ProgressFn | None = None,
    ) -> InstallReport:
        """Copy ``src_dir`` into a temp dir on the store's file system while hashing, write
        the manifest, rename both into place and atomically point the ref at the result.

        Identical content that is already installed intact is a no-op (``changed`` False);
        a damaged snapshot with the same id is replaced by the fresh copy (``repaired``).
        """
        started = time.monotonic()
        check_model_id(model_id)
        check_revision(revision)
        src = Path(src_dir).expanduser()
        files = self._source_files(src)
        total = sum(size for _rel, _path, size in files)
        self._check_free_space(total)

        with fsutil.TempDir(self.layout.tmp, "install") as tmp:
            staged = tmp.path / "files"
            staged.mkdir()
            manifest = self._copy_in(files, staged, total, progress)
            snapshot_id = manifest.snapshot_id
            manifest_tmp = tmp.path / "manifest.json"
            manifest_tmp.write_bytes(manifest.canonical_bytes())
            with open(manifest_tmp, "rb") as f:
                os.fsync(f.fileno())
            os.chmod(manifest_tmp, 0o444)
            fsutil.seal_tree(staged)

            with self._locked(model_id):
                previous = self._current_ref(model_id, revision)
                repaired = False
                target = self.layout.snapshot_dir(model_id, snapshot_id)
                existing = self._intact(model_id, snapshot_id)
                if existing is None:
                    repaired = self._discard_snapshot(model_id, snapshot_id)
                    snapshots = self.layout.snapshots_dir(model_id)
                    snapshots.mkdir(parents=True, exist_ok=True)
                    os.rename(staged, target)
                    os.rename(manifest_tmp, self.layout.manifest_path(model_id, snapshot_id))
                    fsutil.fsync_dir(snapshots)
                changed = previous != snapshot_id or existing is None
                if previous != snapshot_id:
                    fsutil.atomic_write(
                        self.layout.ref_path(model_id, revision), f"{snapshot_id}\n".encode()
                    )
        snapshot = Snapshot(target, snapshot_id, manifest)
        seconds = time.monotonic() - started
        log.info(
            "install %s@%s: snapshot %s (%s)",
            model_id,
            revision,
            snapshot.short_id,
            "changed" if changed else "already installed",
        )
        return InstallReport(model_id, revision, snapshot, previous, changed, repaired, seconds)

    def remove(self, model_id: str, revision: str | None = None) -> builtins.list[str]:
        """Remove a model (every ref and snapshot), or with ``revision`` one ref and its
        snapshot when no other ref points at it. Returns the removed snapshot ids."""
        check_model_id(model_id)
        model_dir = self.layout.model_dir(model_id)
        with self._locked(model_id):
            if revision is None:
                if not model_dir.exists():
                    raise StoreError(problem=f"{model_id} is not in the store at {self.root}")
                removed = list(self._snapshot_ids(model_id))
                with fsutil.TempDir(self.layout.tmp, "remove") as trash:
                    os.rename(model_dir, trash.path / "model")
                    fsutil.fsync_dir(self.layout.models)
                return removed
            ref = self.layout.ref_path(model_id, revision)
            snapshot_id = self._current_ref(model_id, revision)
            if snapshot_id is None:
                raise StoreError(problem=f"{model_id} has no revision {revision!r}")
            ref.unlink()
            fsutil.fsync_dir(ref.parent)
            others = {self._current_ref(model_id, r) for r in self.revisions(model_id)}
            if snapshot_id in others:
                return []
            self._discard_snapshot(model_id, snapshot_id)
            return [snapshot_id]

    def gc(self, keep: int = 0, dry_run: bool = False) -> GcReport:
        """Remove snapshots no ref points to (keeping the ``keep`` newest per model),
        half-installed snapshots, stray ref temp files and abandoned temp directories."""
        if keep < 0:
            raise StoreError(problem="--keep must be 0 or more")
        removed: list[tuple[str, str]] = []
        freed = 0
        for model_id in self.models():
            with self._locked(model_id):
                referenced = {self._current_ref(model_id, r) for r in self.revisions(model_id)}
                complete: list[tuple[float, str]] = []
                doomed: list[str] = []  # half-installed: the pair's renames were cut short
                for snapshot_id, manifest_path in self._snapshot_ids(model_id).items():
                    if snapshot_id in referenced:
                        continue
                    if manifest_path is None:
                        doomed.append(snapshot_id)
                    else:
                        complete.append((manifest_path.stat().st_mtime, snapshot_id))
                complete.sort(reverse=True)
                doomed += [snapshot_id for _mtime, snapshot_id in complete[keep:]]
                for snapshot_id in doomed:
                    freed += fsutil.tree_size(self.layout.snapshot_dir(model_id, snapshot_id))
                    removed.append((model_id, snapshot_id))
                    if not dry_run:
                        self._discard_snapshot(model_id, snapshot_id)
                if not dry_run:
                    self._remove_stray_ref_temps(model_id)
        temp_entries = self._abandoned_temp_entries()
        for path in temp_entries:
            freed += fsutil.tree_size(path) if path.is_dir() else 0
            if not dry_run:
                fsutil.rmtree(path)
        return GcReport(removed, temp_entries, freed)

    def adopt(
        self,
        directory: Path | str,
        model_id: str | None = None,
        revision: str | None = None,
        progress: ProgressFn | None = None,
        check: Callable[[Path], object] | None = None,
    ) -> builtins.list[InstallReport]:
        """Install an existing ModelScope download; see :func:`qwen_ui.store.adopt.find`.
        ``check(folder)`` runs on every folder found before anything is copied (the CLI's
        checkpoint layout check) and raises to refuse."""
        from qwen_ui.store.adopt import find

        sources = find(Path(directory).expanduser(), model_id, revision)
        if check is not None:
            for src, _mid, _rev in sources:
                check(src)
        return [self.install_report(src, mid, rev, progress) for src, mid, rev in sources]

    # --- internals ------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, model_id: str) -> Iterator[None]:
        with fsutil.locked(self.layout.lock_path(model_id)):
            yield

    def _current_ref(self, model_id: str, revision: str) -> str | None:
        try:
            return self.read_ref(model_id, revision)
        except (ModelNotInstalled, ModelCorrupt):
            return None

    def _entry(self, model_id: str, revision: str | None, snapshot_id: str, mtime: float) -> Entry:
        try:
            manifest = self.load_snapshot(model_id, snapshot_id).manifest
            size, count = manifest.total_size, len(manifest.files)
        except ModelCorrupt:
            return Entry(model_id, revision, snapshot_id, None, None, mtime)
        return Entry(model_id, revision, snapshot_id, size, count, mtime)

    def _snapshot_ids(self, model_id: str) -> dict[str, Path | None]:
        """Every snapshot id present as a directory or a manifest -> its manifest (if any)."""
        found: dict[str, Path | None] = {}
        try:
            names = list(self.layout.snapshots_dir(model_id).iterdir())
        except FileNotFoundError:
            return found
        for path in names:
            name = path.name
            if name.endswith(MANIFEST_SUFFIX):
                sid = name[: -len(MANIFEST_SUFFIX)]
                if SNAPSHOT_ID_RE.match(sid):
                    found[sid] = path
            elif SNAPSHOT_ID_RE.match(name):
                found.setdefault(name, None)
        for sid, manifest in list(found.items()):
            if manifest is not None and not self.layout.snapshot_dir(model_id, sid).is_dir():
                found[sid] = None  # a manifest without its files is just as half-installed
        return found

    def _intact(self, model_id: str, snapshot_id: str) -> Snapshot | None:
        """The snapshot when it is present and every file hashes right, else None."""
        if not self.layout.manifest_path(model_id, snapshot_id).exists():
            return None
        try:
            snapshot = self.load_snapshot(model_id, snapshot_id)
            if not snapshot.path.is_dir():
                return None
            self._check_sizes(model_id, snapshot)
            self._check_no_extra_files(model_id, snapshot)
            self._check_hashes(model_id, snapshot)
        except ModelCorrupt as exc:
            log.warning("existing snapshot %s is damaged (%s); replacing it", snapshot_id[:12], exc)
            return None
        return snapshot

    def _discard_snapshot(self, model_id: str, snapshot_id: str) -> bool:
        """Move the snapshot's manifest, then its directory, out of sight and delete them.
        The manifest goes first so an interruption leaves a half-installed snapshot that
        ``gc`` recognises. Caller holds the model lock. Returns whether anything existed."""
        manifest = self.layout.manifest_path(model_id, snapshot_id)
        directory = self.layout.snapshot_dir(model_id, snapshot_id)
        existed = False
        if manifest.exists():
            manifest.unlink()
            existed = True
        if directory.exists():
            with fsutil.TempDir(self.layout.tmp, "discard") as trash:
                os.rename(directory, trash.path / "snapshot")
            existed = True
        if existed:
            fsutil.fsync_dir(directory.parent)
        return existed

    def _remove_stray_ref_temps(self, model_id: str) -> None:
        refs = self.layout.refs_dir(model_id)
        with contextlib.suppress(FileNotFoundError):
            for path in refs.iterdir():
                if path.name.startswith(".") and path.name.endswith(".tmp"):
                    path.unlink(missing_ok=True)

    def _abandoned_temp_entries(self) -> builtins.list[Path]:
        try:
            entries = sorted(self.layout.tmp.iterdir())
        except FileNotFoundError:
            return []
        now = time.time()
        return [p for p in entries if fsutil.is_abandoned(p, now)]

    def _check_sizes(self, model_id: str, snapshot: Snapshot) -> None:
        if not snapshot.path.is_dir():
            raise ModelCorrupt(
                model_id=model_id,
                problem="the snapshot directory is missing",
                path=f"snapshots/{snapshot.id}",
                file=str(snapshot.path),
            )
        for entry in snapshot.manifest.files:
            path = snapshot.path / entry.path
            try:
                st = os.stat(path)
            except FileNotFoundError:
                raise ModelCorrupt(
                    model_id=model_id, problem="file missing", path=entry.path, file=str(path)
                ) from None
            if not stat.S_ISREG(st.st_mode):
                raise ModelCorrupt(
                    model_id=model_id,
                    problem="not a regular file",
                    path=entry.path,
                    file=str(path),
                )
            if st.st_size != entry.size:
                raise ModelCorrupt(
                    model_id=model_id,
                    problem=f"size is {st.st_size} bytes, the manifest says {entry.size}",
                    path=entry.path,
                    file=str(path),
                )

    def _check_no_extra_files(self, model_id: str, snapshot: Snapshot) -> None:
        listed = {e.path for e in snapshot.manifest.files}
        for dirpath, _dirs, names in os.walk(snapshot.path):
            for name in sorted(names):
                path = Path(dirpath) / name
                rel = path.relative_to(snapshot.path).as_posix()
                if rel not in listed:
                    raise ModelCorrupt(
                        model_id=model_id,
                        problem="file not in the manifest",
                        path=rel,
                        file=str(path),
                    )

    def _check_hashes(self, model_id: str, snapshot: Snapshot) -> None:
        files = snapshot.manifest.files
        digests = parallel_map(
            lambda e: hash_file(snapshot.path / e.path)[1],
            files,
            [e.size for e in files],
            self.workers,
        )
        for entry, digest in zip(files, digests, strict=True):
            if digest != entry.sha256:
                raise ModelCorrupt(
                    model_id=model_id,
                    problem="content does not match its sha256",
                    path=entry.path,
                    file=str(snapshot.path / entry.path),
                )

    def _source_files(self, src: Path) -> builtins.list[tuple[str, Path, int]]:
        """(relative path, path, size) of every file to install from ``src``."""
        if not src.is_dir():
            raise StoreError(problem=f"{src} is not a directory")
        files: list[tuple[str, Path, int]] = []
        for dirpath, dirs, names in os.walk(src):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_NAMES)
            for name in sorted(names):
                path = Path(dirpath) / name
                rel = path.relative_to(src).as_posix()
                if name in SKIP_NAMES:
                    continue
                if name.endswith(PARTIAL_SUFFIXES):
                    raise StoreError(
                        problem=f"{path} is an unfinished download; finish the download "
                        "(re-run it) before installing"
                    )
                try:
                    st = path.stat()
                except FileNotFoundError:
                    raise StoreError(problem=f"{path} is a broken symbolic link") from None
                if not stat.S_ISREG(st.st_mode):
                    raise StoreError(problem=f"{path} is not a regular file")
                files.append((rel, path, st.st_size))
        if not files:
            raise StoreError(problem=f"{src} holds no files")
        return files

    def _check_free_space(self, needed: int) -> None:
        self.layout.models.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(self.layout.models).free
        if free < needed + FREE_SPACE_MARGIN:
            raise StoreError(
                problem=f"not enough free space in {self.root}: the install needs "
                f"{human_size(needed + FREE_SPACE_MARGIN)}, {human_size(free)} is free"
            )

    def _copy_in(
        self,
        files: builtins.list[tuple[str, Path, int]],
        staged: Path,
        total: int,
        progress: ProgressFn | None,
    ) -> Manifest:
        done = 0
        lock = threading.Lock()

        def advance(n: int) -> None:
            nonlocal done
            with lock:
                done += n
                current = done
            if progress:
                progress(current, total)

        def copy(item: tuple[str, Path, int]) -> FileEntry:
            rel, path, _size = item
            size, digest = copy_and_hash(path, staged / rel, advance)
            return FileEntry(rel, size, digest)

        entries = parallel_map(copy, files, [f[2] for f in files], self.workers)
        return Manifest.of(entries)


def human_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover
