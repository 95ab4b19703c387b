"""``qwen-ui models …``: install, resolve, verify, list, gc, remove, adopt, fetch, root.

``install`` and ``adopt`` refuse a checkpoint whose architecture or weight layout the local
engine cannot run (:mod:`qwen_ui.engine.layouts`) before copying anything, and ``fetch``
before downloading the weights; ``--skip-layout-check`` installs it anyway.

The store root is ``--model-dir``, else ``QWEN_UI_MODEL_DIR``, else ``QWEN_UI_HOME/models``
(the same derivation the server uses). Errors print one line and exit 2; ``verify`` exits
1 when a snapshot is damaged, after naming the file.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from qwen_ui.errors import FetchError, ModelCorrupt, QwenUIError, StoreError
from qwen_ui.store import DEFAULT_REVISION, InstallReport, ModelStore, fetch
from qwen_ui.store.model_store import ProgressFn, human_size


def register(sub: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--model-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="store root (default: QWEN_UI_MODEL_DIR, else QWEN_UI_HOME/models)",
    )
    parser = sub.add_parser(
        "models",
        help="manage the model store",
        description="Manage the hash-addressed model store (docs/store.md).",
    )
    cmds = parser.add_subparsers(dest="models_command", required=True, metavar="COMMAND")

    p = cmds.add_parser("install", parents=[common], help="copy a model folder into the store")
    p.add_argument("dir", type=Path, metavar="DIR", help="folder holding the model files")
    p.add_argument("--model-id", required=True, metavar="OWNER/NAME")
    p.add_argument(
        "--revision",
        default=DEFAULT_REVISION,
        metavar="REV",
        help=f"name of the ref to point at the result (default {DEFAULT_REVISION})",
    )
    _layout_flag(p)
    p.set_defaults(func=cmd_install)

    p = cmds.add_parser("resolve", parents=[common], help="print a model's snapshot path")
    p.add_argument("model_id", metavar="ID")
    p.add_argument("--revision", metavar="REV", help="default: the model's only revision")
    p.set_defaults(func=cmd_resolve)

    p = cmds.add_parser(
        "verify", parents=[common], help="check sizes (fast) or hashes (--full) of installed models"
    )
    p.add_argument("model_id", metavar="ID", nargs="?", help="default: every model")
    p.add_argument("--revision", metavar="REV", help="default: every revision")
    p.add_argument("--full", action="store_true", help="hash every file (reads everything)")
    p.set_defaults(func=cmd_verify)

    p = cmds.add_parser("list", parents=[common], help="list installed models")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(func=cmd_list)

    p = cmds.add_parser(
        "gc", parents=[common], help="remove snapshots no ref points to, and leftovers of crashes"
    )
    p.add_argument(
        "--keep",
        type=int,
        default=0,
        metavar="N",
        help="keep the N newest unreferenced snapshots of each model (default 0)",
    )
    p.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    p.set_defaults(func=cmd_gc)

    p = cmds.add_parser("remove", parents=[common], help="remove a model or one revision")
    p.add_argument("model_id", metavar="ID")
    p.add_argument(
        "--revision",
        metavar="REV",
        help="remove only this ref (and its snapshot if nothing else uses it)",
    )
    p.set_defaults(func=cmd_remove)

    p = cmds.add_parser(
        "adopt",
        parents=[common],
        help="install an existing ModelScope cache or --local-dir download",
        description="Install models from a ModelScope cache root (models/<owner>--<name>/"
        "snapshots/<rev>/), one model or revision folder of it, or a plain --local-dir "
        "download (then --model-id is required).",
    )
    p.add_argument("dir", type=Path, metavar="DIR")
    p.add_argument("--model-id", metavar="OWNER/NAME", help="only this model (or: its id)")
    p.add_argument("--revision", metavar="REV", help="only this revision (or: its name)")
    _layout_flag(p)
    p.set_defaults(func=cmd_adopt)

    p = cmds.add_parser(
        "fetch",
        parents=[common],
        help="download a model from ModelScope into the staging folder (no install)",
        description="Check that ModelScope answers (one request, --timeout seconds) and that "
        "the disk has room, then download into STORE/staging/<owner>--<name>/<rev> with the "
        "ModelScope SDK; a re-run resumes. scripts/cache_model.sh runs this, then install. "
        f"Exit codes: 0 downloaded, {fetch.EXIT_UP_TO_DATE} already installed and identical "
        f"(nothing downloaded), {fetch.EXIT_UNREACHABLE} ModelScope unreachable, "
        f"{fetch.EXIT_NOT_FOUND} no such model or revision, {fetch.EXIT_NO_SPACE} not enough "
        f"free space, {fetch.EXIT_DOWNLOAD_FAILED} the download failed (re-run to resume), "
        f"{fetch.EXIT_UNSUPPORTED} the engine cannot run the checkpoint (its config.json is "
        "checked before the weights are downloaded).",
    )
    p.add_argument("model_id", metavar="ID")
    p.add_argument("--revision", default=DEFAULT_REVISION, metavar="REV")
    p.add_argument(
        "--endpoint",
        metavar="URL",
        help=f"ModelScope endpoint (default: MODELSCOPE_ENDPOINT, else {fetch.DEFAULT_ENDPOINT})",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds to wait for ModelScope's first answer (default 5)",
    )
    p.add_argument(
        "--min-free-gb",
        type=float,
        default=16.0,
        metavar="N",
        help="free space required when the repository size cannot be listed (default 16)",
    )
    p.add_argument("--check-only", action="store_true", help="check, do not download")
    _layout_flag(p)
    p.add_argument(
        "--force",
        action="store_true",
        help="download even when the store has identical content (to repair a "
        "snapshot that verify --full reported damaged)",
    )
    p.set_defaults(func=cmd_fetch)

    p = cmds.add_parser("root", parents=[common], help="print the store root")
    p.set_defaults(func=cmd_root)

    p = cmds.add_parser(
        "install-demo",
        parents=[common],
        help="install the shipped shapes demo model (revisions bf16 and awq)",
    )
    p.set_defaults(func=cmd_install_demo)


def _layout_flag(parser: Any) -> None:
    parser.add_argument(
        "--skip-layout-check",
        action="store_true",
        help="do not refuse a checkpoint whose architecture or quantization layout the "
        "local engine cannot run (docs/store.md, 'Checkpoint layouts')",
    )


def check_layout(folder: Path) -> None:
    """Refuse (``UnsupportedCheckpoint``) a checkpoint the local engine cannot run; print
    what it is otherwise."""
    from qwen_ui.engine.layouts import check_folder

    print(f"checkpoint layout: {check_folder(folder).describe()}", file=sys.stderr)


def open_store(args: argparse.Namespace) -> ModelStore:
    if args.model_dir is not None:
        return ModelStore(args.model_dir)
    from qwen_ui.settings import Settings

    return ModelStore(Settings().model_path)


# --- commands ---------------------------------------------------------------------------


def cmd_install(args: argparse.Namespace) -> int:
    store = open_store(args)
    if not args.skip_layout_check and args.dir.is_dir():  # a missing folder: install says so
        check_layout(args.dir)
    with _progress_line() as progress:
        report = _os_errors(
            lambda: store.install_report(args.dir, args.model_id, args.revision, progress)
        )
    _print_install(report)
    return 0


def cmd_adopt(args: argparse.Namespace) -> int:
    store = open_store(args)
    with _progress_line() as progress:
        check = None if args.skip_layout_check else check_layout
        reports = _os_errors(
            lambda: store.adopt(args.dir, args.model_id, args.revision, progress, check)
        )
    for report in reports:
        _print_install(report)
    return 0


def cmd_resolve(args: argparse.Namespace) -> int:
    store = open_store(args)
    revision = args.revision or _only_revision(store, args.model_id)
    print(store.resolve(args.model_id, revision).path)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    store = open_store(args)
    targets = _targets(store, args.model_id, args.revision)
    if not targets:
        print(f"no models in {store.root}")
        return 0
    failed = 0
    for model_id, revision in targets:
        started = time.perf_counter()
        try:
            snapshot = store.verify(model_id, revision, full=args.full)
        except QwenUIError as exc:
            print(f"FAILED {model_id}@{revision}: {exc.message('en')}", file=sys.stderr)
            file = exc.params.get("file")
            if file:
                print(f"       file: {file}", file=sys.stderr)
            if isinstance(exc, ModelCorrupt):
                print(
                    f"       repair: scripts/cache_model.sh --force {model_id} {revision}, "
                    f"or qwen-ui models install DIR --model-id {model_id} --revision "
                    f"{revision} (installing intact files replaces damaged ones)",
                    file=sys.stderr,
                )
            failed += 1
            continue
        seconds = time.perf_counter() - started
        size = snapshot.manifest.total_size
        what = "sha256" if args.full else "sizes"
        rate = f", {size / seconds / 1e6:.0f} MB/s" if args.full and seconds > 0 else ""
        print(
            f"ok     {model_id}@{revision} {snapshot.short_id}: "
            f"{len(snapshot.manifest.files)} files, {human_size(size)}, "
            f"{what} checked in {_duration(seconds)}{rate}"
        )
    return 1 if failed else 0


def cmd_list(args: argparse.Namespace) -> int:
    store = open_store(args)
    entries = store.list()
    if args.json:
        for e in entries:
            print(
                json.dumps(
                    {
                        "model_id": e.model_id,
                        "revision": e.revision,
                        "snapshot": e.snapshot_id,
                        "size": e.size,
                        "files": e.files,
                        "installed_at": e.installed_at,
                    }
                )
            )
        return 0
    if not entries:
        print(f"no models in {store.root}")
        return 0
    rows = [("MODEL", "REVISION", "SNAPSHOT", "SIZE", "INSTALLED")]
    for e in entries:
        rows.append(
            (
                e.model_id,
                e.revision or "-",
                e.snapshot_id[:12],
                human_size(e.size) if e.size is not None else "damaged",
                datetime.fromtimestamp(e.installed_at).strftime("%Y-%m-%d %H:%M:%S"),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    if any(e.revision is None for e in entries):
        print("(revision '-': no ref points at the snapshot; `qwen-ui models gc` removes it)")
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    store = open_store(args)
    report = store.gc(keep=args.keep, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for model_id, snapshot_id in report.snapshots:
        print(f"{verb} snapshot {model_id} {snapshot_id[:12]}")
    for path in report.temp_entries:
        print(f"{verb} leftover {path}")
    print(
        f"{verb} {len(report.snapshots)} snapshot(s), {len(report.temp_entries)} "
        f"leftover(s), {human_size(report.freed_bytes)}"
    )
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    store = open_store(args)
    removed = store.remove(args.model_id, args.revision)
    what = f"{args.model_id}@{args.revision}" if args.revision else args.model_id
    ids = ", ".join(s[:12] for s in removed) or "none; another ref still uses it"
    print(f"removed {what} (snapshots: {ids})")
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    store = open_store(args)
    endpoint = fetch.endpoint_from_env(args.endpoint)
    try:
        plan = fetch.plan(
            store,
            args.model_id,
            args.revision,
            endpoint,
            args.timeout,
            int(args.min_free_gb * 1024**3),
        )
    except FetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    head = f"{args.model_id}@{args.revision}"
    if plan.files is None:
        print(
            f"ModelScope at {endpoint} answered without a file list this command "
            f"understands; requiring {human_size(plan.needed)} free (--min-free-gb)"
        )
    else:
        print(
            f"{head} on ModelScope ({endpoint}): {len(plan.files)} files, "
            f"{human_size(plan.total or 0)}"
            + (f"; {human_size(plan.staged)} already downloaded" if plan.staged else "")
        )
    if plan.up_to_date and not args.force:
        print(f"{head} is already installed and identical to ModelScope; nothing to download")
        return fetch.EXIT_UP_TO_DATE
    print(
        f"free space in {store.root}: {human_size(plan.free)} (needed: {human_size(plan.needed)})"
    )
    listed = plan.files is None or any(f.path == fetch.CONFIG for f in plan.files)
    if listed and not args.skip_layout_check and not _remote_layout_ok(store, args, endpoint):
        return fetch.EXIT_UNSUPPORTED
    if args.check_only:
        return 0
    try:
        path = fetch.download(store, args.model_id, args.revision, endpoint)
    except FetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"downloaded {head} into {path}")
    return 0


def _remote_layout_ok(store: ModelStore, args: argparse.Namespace, endpoint: str) -> bool:
    """Check the repository's config.json (downloaded alone) before the weights."""
    from qwen_ui.engine.errors import UnsupportedCheckpoint
    from qwen_ui.engine.layouts import check_config

    config = fetch.fetch_config(store, args.model_id, args.revision, endpoint, args.timeout)
    if config is None:
        print("no config.json to check before the download; install checks the files")
        return True
    try:
        layout = check_config(config)
    except UnsupportedCheckpoint as exc:
        print(f"error: {exc.message('en')}", file=sys.stderr)
        print("nothing downloaded but config.json (--skip-layout-check to go on)", file=sys.stderr)
        return False
    print(f"checkpoint layout: {layout.describe()}")
    return True


def cmd_install_demo(args: argparse.Namespace) -> int:
    from qwen_ui.demo.install import install_demo

    for revision, snapshot in install_demo(open_store(args)).items():
        print(f"qwen-ui/shapes-vl-demo@{revision} -> {snapshot.short_id}  {snapshot.path}")
    return 0


def cmd_root(args: argparse.Namespace) -> int:
    print(open_store(args).root)
    return 0


# --- helpers ----------------------------------------------------------------------------


def _only_revision(store: ModelStore, model_id: str) -> str:
    revisions = store.revisions(model_id)
    if len(revisions) == 1:
        return revisions[0]
    if not revisions:
        return DEFAULT_REVISION  # resolve() then names the install command
    raise StoreError(problem=f"{model_id} has revisions {', '.join(revisions)}; pass --revision")


def _targets(
    store: ModelStore, model_id: str | None, revision: str | None
) -> list[tuple[str, str]]:
    if model_id is not None and revision is not None:
        return [(model_id, revision)]
    models = [model_id] if model_id is not None else store.models()
    targets = [(m, r) for m in models for r in store.revisions(m)]
    if model_id is not None and not targets:
        return [(model_id, DEFAULT_REVISION)]  # verify() then names the install command
    return targets


def _print_install(report: InstallReport) -> None:
    snap = report.snapshot
    head = f"{report.model_id}@{report.revision}"
    body = (
        f"snapshot {snap.short_id} ({len(snap.manifest.files)} files, "
        f"{human_size(snap.manifest.total_size)})"
    )
    if not report.changed:
        print(f"already installed: {head} -> {body}; nothing changed")
        return
    note = " (replaced a damaged copy)" if report.repaired else ""
    if report.previous_id and report.previous_id != snap.id:
        note += f" (was {report.previous_id[:12]}; `qwen-ui models gc` frees the old one)"
    print(f"installed {head} -> {body} in {_duration(report.seconds)}{note}")
    print(snap.path)


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.1f} s"


def _os_errors(fn: Any) -> Any:
    """Run ``fn``; an OSError (disk full, permission) becomes a one-line StoreError."""
    try:
        return fn()
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        raise StoreError(problem=f"{exc.strerror or exc}{where}") from exc


class _progress_line:
    """A throttled ``done / total`` line on stderr while copying, when stderr is a terminal."""

    def __init__(self) -> None:
        self.enabled = sys.stderr.isatty()
        self.last = 0.0
        self.lock = threading.Lock()
        self.shown = False

    def __enter__(self) -> ProgressFn | None:
        return self.update if self.enabled else None

    def update(self, done: int, total: int) -> None:
        now = time.monotonic()
        with self.lock:
            if now - self.last < 0.2 and done < total:
                return
            self.last = now
            self.shown = True
            pct = 100 * done / total if total else 100
            print(
                f"\r  copying and hashing: {human_size(done)} / {human_size(total)} ({pct:.0f}%)",
                end="",
                file=sys.stderr,
                flush=True,
            )

    def __exit__(self, *exc: object) -> None:
        if self.shown:
            print(file=sys.stderr)
