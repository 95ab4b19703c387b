"""Crashes and concurrency: SIGKILL at chosen points of an install, two installers at
once, and readers resolving while refs move."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest

from qwen_ui.errors import ModelCorrupt
from qwen_ui.store import ModelStore, fsutil
from tests.store.support import (
    make_model,
    model_files,
    snapshot_dirs,
    start_child,
    temp_entries,
    wait_for,
)

MODEL = "Qwen/Tiny-VL"
BIG = 24 * 1024 * 1024  # three 8 MiB copy chunks: the kill lands with work left to do


@pytest.mark.parametrize("phase", ["copy", "after-dir-rename", "before-ref", "ref-temp-written"])
def test_sigkill_mid_install_leaves_the_store_consistent(
    tmp_path: Path, phase: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ModelStore(tmp_path / "store")
    old = store.install(make_model(tmp_path / "old", seed=1), MODEL, "master")
    new_src = make_model(tmp_path / "new", model_files(seed=2, big=BIG))

    signal_file = tmp_path / "paused"
    child = start_child(store.root, new_src, MODEL, "master", phase, signal_file)
    wait_for(signal_file, child)
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL

    # the old ref is intact and still resolves to intact content
    assert store.resolve(MODEL, "master") == old
    assert store.verify(MODEL, "master", full=True) == old
    # nothing half-made is visible through the store: besides the ref, at most the new
    # snapshot, complete but unreferenced (the kill came after its renames)
    entries = store.list()
    assert [(e.revision, e.snapshot_id) for e in entries if e.revision] == [("master", old.id)]
    others = [e for e in entries if e.revision is None]
    assert len(others) == (1 if phase in ("before-ref", "ref-temp-written") else 0)
    for entry in others:
        assert entry.size == sum(len(v) for v in model_files(seed=2, big=BIG).values())
    refs = sorted(p.name for p in store.layout.refs_dir(MODEL).iterdir())
    if phase == "ref-temp-written":
        assert refs[0].startswith(".master.") and refs[1:] == ["master"]
    else:
        assert refs == ["master"]
    # the dead installer's temp dir is no longer locked, so gc can take it
    monkeypatch.setattr(fsutil, "STALE_AFTER_S", 0.0)
    leftovers = temp_entries(store)
    assert store.gc().temp_entries == [store.layout.tmp / n for n in leftovers]
    assert temp_entries(store) == []
    assert snapshot_dirs(store, MODEL) == [old.id, f"{old.id}.manifest.json"]
    assert sorted(p.name for p in store.layout.refs_dir(MODEL).iterdir()) == ["master"]

    # and the next install works
    new = store.install(new_src, MODEL, "master")
    assert new.id != old.id
    assert store.verify(MODEL, "master", full=True) == new


def test_sigkill_then_install_without_gc(tmp_path: Path) -> None:
    """A half-renamed snapshot of the same content left by a crash is replaced, not trusted."""
    store = ModelStore(tmp_path / "store")
    src = make_model(tmp_path / "src", model_files(seed=2, big=BIG))
    signal_file = tmp_path / "paused"
    child = start_child(store.root, src, MODEL, "master", "after-dir-rename", signal_file)
    wait_for(signal_file, child)
    child.kill()
    child.communicate(timeout=30)
    snap = store.install(src, MODEL, "master")
    assert store.verify(MODEL, "master", full=True) == snap


@pytest.mark.parametrize("same_content", [True, False])
def test_two_installs_at_once(tmp_path: Path, same_content: bool) -> None:
    store = ModelStore(tmp_path / "store")
    srcs = [
        make_model(tmp_path / f"src{i}", model_files(seed=1 if same_content else i, big=BIG))
        for i in range(2)
    ]
    marks = [tmp_path / f"at-barrier-{i}" for i in range(2)]
    children = [
        start_child(store.root, srcs[i], MODEL, "master", "barrier", marks[i], barrier=marks)
        for i in range(2)
    ]
    for child in children:
        _out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err

    snap = store.verify(MODEL, "master", full=True)
    assert temp_entries(store) == []
    ids = {ModelStore(tmp_path / "x").install(s, MODEL, "master").id for s in srcs}
    assert snap.id in ids
    expected = sorted(ids | {f"{i}.manifest.json" for i in ids})
    assert snapshot_dirs(store, MODEL) == expected
    assert len(snapshot_dirs(store, MODEL)) == (2 if same_content else 4)
    for sid in ids:
        store.load_snapshot(MODEL, sid)  # every snapshot on disk is complete


def test_readers_see_old_or_new_ref_never_partial(tmp_path: Path) -> None:
    store = ModelStore(tmp_path / "store")
    srcs = [make_model(tmp_path / f"src{i}", seed=i) for i in range(2)]
    ids = [store.install(s, MODEL, f"v{i}").id for i, s in enumerate(srcs)]
    store.install(srcs[0], MODEL, "master")
    seen: list[set[str]] = [set(), set()]
    errors: list[Exception] = []
    stop = threading.Event()

    def reader(mine: set[str]) -> None:
        while not stop.is_set():
            try:
                mine.add(store.resolve(MODEL, "master").id)
            except ModelCorrupt as exc:  # pragma: no cover - the failure this test looks for
                errors.append(exc)

    threads = [threading.Thread(target=reader, args=(s,)) for s in seen]
    for t in threads:
        t.start()
    try:
        for i in range(1, 21):
            store.install(srcs[i % 2], MODEL, "master")
            # wait until every reader has seen this ref, so each install meets live readers
            for mine in seen:
                mine.clear()
            deadline = time.monotonic() + 10
            while not all(ids[i % 2] in mine for mine in seen):
                assert time.monotonic() < deadline, "a reader stopped seeing ref updates"
                time.sleep(0.001)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert errors == []
    assert set().union(*seen) <= set(ids)
