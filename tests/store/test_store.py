"""The store's operations on generated model folders."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from pathlib import Path

import pytest

from qwen_ui.errors import ModelCorrupt, ModelNotInstalled, StoreError
from qwen_ui.settings import DEMO_MODEL_ID, Settings
from qwen_ui.store import Manifest, ModelStore, fsutil
from tests.store.support import make_model, model_files, snapshot_dirs, temp_entries

MODEL = "Qwen/Tiny-VL"


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    return ModelStore(tmp_path / "store")


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return make_model(tmp_path / "src")


def writable(path: Path) -> Path:
    os.chmod(path, 0o644)
    return path


# --- install and resolve ---------------------------------------------------------------


def test_install_then_resolve(store: ModelStore, src: Path) -> None:
    snap = store.install(src, MODEL, "master")
    assert snap.path == store.root / "models" / "Qwen--Tiny-VL" / "snapshots" / snap.id
    assert store.resolve(MODEL, "master") == snap
    assert store.is_installed(MODEL, "master")
    assert not store.is_installed(MODEL, "other")
    for rel, data in model_files().items():
        assert (snap.path / rel).read_bytes() == data
    assert {e.path for e in snap.manifest.files} == set(model_files())
    ref = store.ref_path(MODEL, "master").read_text()
    assert ref == snap.id + "\n"


def test_snapshot_id_is_sha256_of_canonical_manifest(store: ModelStore, src: Path) -> None:
    snap = store.install(src, MODEL, "master")
    manifest_file = snap.path.parent / f"{snap.id}.manifest.json"
    data = manifest_file.read_bytes()
    assert hashlib.sha256(data).hexdigest() == snap.id
    obj = json.loads(data)
    assert data == json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    for entry in obj["files"]:
        content = (src / entry["path"]).read_bytes()
        assert entry["size"] == len(content)
        assert entry["sha256"] == hashlib.sha256(content).hexdigest()
    assert Manifest.from_bytes(data).snapshot_id == snap.id


def test_same_content_same_id_anywhere(store: ModelStore, tmp_path: Path) -> None:
    a = store.install(make_model(tmp_path / "a"), MODEL, "master")
    b = store.install(make_model(tmp_path / "b"), MODEL, "v1")
    c = store.install(make_model(tmp_path / "c"), "other/model", "master")
    assert a.id == b.id == c.id
    assert snapshot_dirs(store, MODEL) == [a.id, f"{a.id}.manifest.json"]


def test_snapshot_is_read_only(store: ModelStore, src: Path) -> None:
    snap = store.install(src, MODEL, "master")
    for dirpath, _dirs, files in os.walk(snap.path):
        assert stat.S_IMODE(os.stat(dirpath).st_mode) == 0o555
        for name in files:
            assert stat.S_IMODE(os.stat(Path(dirpath) / name).st_mode) == 0o444


def test_identical_install_is_a_no_op(store: ModelStore, src: Path) -> None:
    first = store.install_report(src, MODEL, "master")
    ref = store.ref_path(MODEL, "master")
    before = (ref.stat().st_mtime_ns, ref.stat().st_ino, snapshot_dirs(store, MODEL))
    again = store.install_report(src, MODEL, "master")
    assert first.changed and not again.changed and not again.repaired
    assert again.snapshot == first.snapshot
    assert (ref.stat().st_mtime_ns, ref.stat().st_ino, snapshot_dirs(store, MODEL)) == before
    assert temp_entries(store) == []


def test_new_content_moves_the_ref(store: ModelStore, tmp_path: Path) -> None:
    old = store.install(make_model(tmp_path / "a", seed=1), MODEL, "master")
    report = store.install_report(make_model(tmp_path / "b", seed=2), MODEL, "master")
    assert report.changed and report.previous_id == old.id
    assert store.resolve(MODEL, "master").id == report.snapshot.id != old.id
    assert store.resolve(MODEL, "master").path.joinpath("config.json").read_bytes().endswith(b"2}")


def test_install_skips_download_bookkeeping(store: ModelStore, src: Path) -> None:
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref")
    (src / "._____temp").mkdir()
    (src / "._____temp" / "x").write_text("partial")
    (src / ".msc").write_bytes(b"meta")
    snap = store.install(src, MODEL, "master")
    assert {e.path for e in snap.manifest.files} == set(model_files())


def test_install_refuses_an_unfinished_download(store: ModelStore, src: Path) -> None:
    (src / "model-00003.safetensors.incomplete").write_bytes(b"half")
    with pytest.raises(StoreError, match=r"unfinished download"):
        store.install(src, MODEL, "master")
    assert not store.is_installed(MODEL, "master")


@pytest.mark.parametrize("model_id", ["noslash", "a/b/c", "own--er/x", "/x", "a/.."])
def test_bad_model_ids(store: ModelStore, src: Path, model_id: str) -> None:
    with pytest.raises(StoreError):
        store.install(src, model_id, "master")
    assert not store.is_installed(model_id, "master")


@pytest.mark.parametrize("revision", ["", ".hidden", "a/b", ".."])
def test_bad_revisions(store: ModelStore, src: Path, revision: str) -> None:
    with pytest.raises(StoreError):
        store.install(src, MODEL, revision)


def test_install_from_missing_or_empty_dir(store: ModelStore, tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="not a directory"):
        store.install(tmp_path / "nope", MODEL, "master")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError, match="holds no files"):
        store.install(tmp_path / "empty", MODEL, "master")


def test_install_checks_free_space(
    store: ModelStore, src: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(1, 1, 1000))  # type: ignore[attr-defined]
    with pytest.raises(StoreError, match="not enough free space"):
        store.install(src, MODEL, "master")
    assert temp_entries(store) == []


def test_install_progress_reaches_total(store: ModelStore, src: Path) -> None:
    seen: list[tuple[int, int]] = []
    store.install(src, MODEL, "master", progress=lambda d, t: seen.append((d, t)))
    total = sum(len(v) for v in model_files().values())
    assert max(seen) == (total, total)


# --- not installed, corrupt --------------------------------------------------------------


def test_not_installed_names_the_install_command(store: ModelStore) -> None:
    with pytest.raises(ModelNotInstalled) as info:
        store.resolve(MODEL, "master")
    message = info.value.message("en")
    assert f"qwen-ui models install DIR --model-id {MODEL} --revision master" in message
    assert f"scripts/cache_model.sh {MODEL} master" in message
    assert info.value.status == 503


def test_demo_model_names_install_demo(store: ModelStore) -> None:
    with pytest.raises(ModelNotInstalled, match="qwen-ui models install-demo"):
        store.resolve(DEMO_MODEL_ID, Settings().model_revision)


def test_size_change_is_caught_by_resolve_and_fast_verify(store: ModelStore, src: Path) -> None:
    snap = store.install(src, MODEL, "master")
    victim = writable(snap.path / "model-00002-of-00002.safetensors")
    with open(victim, "ab") as f:
        f.write(b"x")
    for call in (lambda: store.resolve(MODEL, "master"), lambda: store.verify(MODEL, "master")):
        with pytest.raises(ModelCorrupt) as info:
            call()
        assert info.value.params["path"] == "model-00002-of-00002.safetensors"
        assert "model-00002-of-00002.safetensors" in info.value.message("en")
        assert "30001" in info.value.message("en")


def test_same_size_change_is_caught_only_by_full_verify(store: ModelStore, src: Path) -> None:
    snap = store.install(src, MODEL, "master")
    victim = writable(snap.path / "sub" / "dir" / "preprocessor_config.json")
    victim.write_bytes(b"[]")  # same two bytes long
    assert store.resolve(MODEL, "master") == snap
    assert store.verify(MODEL, "master") == snap
    with pytest.raises(ModelCorrupt) as info:
        store.verify(MODEL, "master", full=True)
    assert info.value.params["path"] == "sub/dir/preprocessor_config.json"
    assert "sub/dir/preprocessor_config.json" in info.value.message("en")
    assert "sha256" in info.value.message("en")


def test_full_verify_names_the_first_bad_file_in_manifest_order(
    store: ModelStore, src: Path
) -> None:
    snap = store.install(src, MODEL, "master")
    for rel in ("tokenizer.json", "config.json"):
        path = writable(snap.path / rel)
        data = bytearray(path.read_bytes())
        data[0] ^= 1
        path.write_bytes(bytes(data))
    with pytest.raises(ModelCorrupt) as info:
        store.verify(MODEL, "master", full=True)
    assert info.value.params["path"] == "config.json"


def test_missing_file(store: ModelStore, src: Path) -> None:
    snap = store.install(src, MODEL, "master")
    os.chmod(snap.path, 0o755)
    (snap.path / "tokenizer.json").unlink()
    with pytest.raises(ModelCorrupt, match=r"file missing \(tokenizer.json\)"):
        store.resolve(MODEL, "master")


def test_extra_file_is_caught_by_verify(store: ModelStore, src: Path) -> None:
    snap = store.install(src, MODEL, "master")
    os.chmod(snap.path, 0o755)
    (snap.path / "stray.bin").write_bytes(b"?")
    store.resolve(MODEL, "master")  # resolve only checks the listed files
    with pytest.raises(ModelCorrupt, match=r"not in the manifest \(stray.bin\)"):
        store.verify(MODEL, "master")


def test_tampered_manifest_and_ref(store: ModelStore, src: Path) -> None:
    snap = store.install(src, MODEL, "master")
    manifest = writable(snap.path.parent / f"{snap.id}.manifest.json")
    manifest.write_bytes(manifest.read_bytes().replace(b'"size":2', b'"size":3'))
    with pytest.raises(ModelCorrupt, match="does not match the snapshot id"):
        store.resolve(MODEL, "master")
    store.ref_path(MODEL, "master").write_text("garbage\n")
    with pytest.raises(ModelCorrupt, match="does not hold a snapshot id"):
        store.resolve(MODEL, "master")


def test_reinstall_repairs_a_damaged_snapshot(store: ModelStore, src: Path) -> None:
    snap = store.install(src, MODEL, "master")
    victim = writable(snap.path / "config.json")
    victim.write_bytes(victim.read_bytes().upper())  # same size: only a full verify sees it
    report = store.install_report(src, MODEL, "master")
    assert report.changed and report.repaired and report.snapshot.id == snap.id
    assert store.verify(MODEL, "master", full=True).id == snap.id
    assert temp_entries(store) == []


# --- list, gc, remove --------------------------------------------------------------------


def test_list(store: ModelStore, tmp_path: Path) -> None:
    assert store.list() == []
    t0 = time.time()
    a = store.install(make_model(tmp_path / "a", seed=1), MODEL, "master")
    b = store.install(make_model(tmp_path / "b", seed=2), MODEL, "v2")
    c = store.install(make_model(tmp_path / "c", seed=3), "other/m", "master")
    rows = {(e.model_id, e.revision): e for e in store.list()}
    assert set(rows) == {(MODEL, "master"), (MODEL, "v2"), ("other/m", "master")}
    assert rows[(MODEL, "master")].snapshot_id == a.id
    assert rows[(MODEL, "v2")].snapshot_id == b.id
    assert rows[("other/m", "master")].size == c.manifest.total_size
    assert rows[(MODEL, "master")].files == len(model_files())
    assert all(t0 - 1 <= e.installed_at <= time.time() + 1 for e in rows.values())
    store.install(make_model(tmp_path / "d", seed=4), MODEL, "master")
    unreferenced = [e for e in store.list() if e.revision is None]
    assert [(e.model_id, e.snapshot_id) for e in unreferenced] == [(MODEL, a.id)]


def test_gc_removes_unreferenced_snapshots(store: ModelStore, tmp_path: Path) -> None:
    ids = [
        store.install(make_model(tmp_path / str(i), seed=i), MODEL, "master").id for i in range(4)
    ]
    for i, sid in enumerate(ids):  # make the install order unambiguous
        manifest = store.layout.manifest_path(MODEL, sid)
        os.utime(manifest, (1000 + i, 1000 + i))
    dry = store.gc(keep=1, dry_run=True)
    assert sorted(s for _m, s in dry.snapshots) == sorted(ids[:2])
    assert len(snapshot_dirs(store, MODEL)) == 8
    report = store.gc(keep=1)
    assert sorted(s for _m, s in report.snapshots) == sorted(ids[:2])
    assert report.freed_bytes >= 2 * sum(len(v) for v in model_files().values())
    kept = {ids[2], ids[3]}
    assert snapshot_dirs(store, MODEL) == sorted(kept | {f"{s}.manifest.json" for s in kept})
    store.gc()
    assert snapshot_dirs(store, MODEL) == [ids[3], f"{ids[3]}.manifest.json"]
    assert store.verify(MODEL, "master", full=True).id == ids[3]


def test_gc_removes_abandoned_temp_dirs_but_not_live_ones(
    store: ModelStore, src: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.install(src, MODEL, "master")
    crashed = store.layout.tmp / "install-deadbeef"
    (crashed / "files").mkdir(parents=True)
    (crashed / "files" / "half.bin").write_bytes(b"x" * 1000)
    fresh = store.layout.tmp / "install-justnow"
    fresh.mkdir()
    old = time.time() - 3600
    os.utime(crashed, (old, old))
    with fsutil.TempDir(store.layout.tmp, "install") as live:
        os.utime(live.path, (old, old))
        report = store.gc()
        assert report.temp_entries == [crashed]
        assert sorted(temp_entries(store)) == sorted([fresh.name, live.path.name])
    monkeypatch.setattr(fsutil, "STALE_AFTER_S", 0.0)
    assert store.gc().temp_entries == [fresh]
    assert temp_entries(store) == []


def test_gc_removes_half_installed_snapshots(store: ModelStore, src: Path) -> None:
    snap = store.install(src, MODEL, "master")
    fake = "f" * 64
    half = store.layout.snapshot_dir(MODEL, fake)
    half.mkdir()
    (half / "x").write_bytes(b"1")
    orphan_manifest = store.layout.manifest_path(MODEL, "e" * 64)
    orphan_manifest.write_bytes(b"{}")
    assert [e.snapshot_id for e in store.list()] == [snap.id]  # neither is listed
    store.gc(keep=5)  # half-installed ones go regardless of keep
    assert snapshot_dirs(store, MODEL) == [snap.id, f"{snap.id}.manifest.json"]


def test_remove_model(store: ModelStore, tmp_path: Path) -> None:
    store.install(make_model(tmp_path / "a", seed=1), MODEL, "master")
    store.install(make_model(tmp_path / "b", seed=2), MODEL, "v2")
    keep = store.install(make_model(tmp_path / "c"), "other/m", "master")
    assert len(store.remove(MODEL)) == 2
    assert not store.model_dir(MODEL).exists()
    assert temp_entries(store) == []
    with pytest.raises(ModelNotInstalled):
        store.resolve(MODEL, "master")
    assert store.resolve("other/m", "master") == keep
    with pytest.raises(StoreError, match="not in the store"):
        store.remove(MODEL)


def test_remove_revision(store: ModelStore, tmp_path: Path) -> None:
    a = store.install(make_model(tmp_path / "a", seed=1), MODEL, "master")
    store.install(make_model(tmp_path / "a", seed=1), MODEL, "alias")
    b = store.install(make_model(tmp_path / "b", seed=2), MODEL, "v2")
    assert store.remove(MODEL, "alias") == []  # master still uses the snapshot
    assert store.resolve(MODEL, "master") == a
    assert store.remove(MODEL, "v2") == [b.id]
    assert not store.layout.snapshot_dir(MODEL, b.id).exists()
    with pytest.raises(StoreError, match="no revision"):
        store.remove(MODEL, "v2")


# --- adopt -------------------------------------------------------------------------------


def modelscope_cache(root: Path) -> Path:
    """A MODELSCOPE_CACHE root in the 1.38+ layout with two models and three revisions."""
    make_model(root / "models" / "Qwen--Tiny-VL" / "snapshots" / "master", seed=1)
    make_model(root / "models" / "Qwen--Tiny-VL" / "snapshots" / "v1.0", seed=2)
    make_model(root / "models" / "acme--Other" / "snapshots" / "master", seed=3)
    (root / ".lock").mkdir()
    return root


def test_adopt_cache_root(store: ModelStore, tmp_path: Path) -> None:
    cache = modelscope_cache(tmp_path / "cache")
    reports = store.adopt(cache)
    assert {(r.model_id, r.revision) for r in reports} == {
        (MODEL, "master"),
        (MODEL, "v1.0"),
        ("acme/Other", "master"),
    }
    assert store.resolve(MODEL, "v1.0").path.joinpath("config.json").read_bytes().endswith(b"2}")


def test_adopt_one_model_of_a_cache_root(store: ModelStore, tmp_path: Path) -> None:
    cache = modelscope_cache(tmp_path / "cache")
    reports = store.adopt(cache, model_id="acme/Other")
    assert [(r.model_id, r.revision) for r in reports] == [("acme/Other", "master")]
    reports = store.adopt(cache, model_id=MODEL, revision="v1.0")
    assert [(r.model_id, r.revision) for r in reports] == [(MODEL, "v1.0")]
    with pytest.raises(StoreError, match="no snapshot of nobody/x"):
        store.adopt(cache, model_id="nobody/x")


def test_adopt_model_folder_and_revision_folder(store: ModelStore, tmp_path: Path) -> None:
    cache = modelscope_cache(tmp_path / "cache")
    folder = cache / "models" / "Qwen--Tiny-VL"
    assert {r.revision for r in store.adopt(folder)} == {"master", "v1.0"}
    reports = store.adopt(folder / "snapshots" / "v1.0")
    assert [(r.model_id, r.revision, r.changed) for r in reports] == [(MODEL, "v1.0", False)]
    with pytest.raises(StoreError, match="no revision 'v9'"):
        store.adopt(folder, revision="v9")


def test_adopt_another_store_keeps_revision_names(store: ModelStore, tmp_path: Path) -> None:
    other = ModelStore(tmp_path / "other")
    snap = other.install(make_model(tmp_path / "src"), MODEL, "bf16")
    reports = store.adopt(other.model_dir(MODEL))
    assert [(r.revision, r.snapshot.id) for r in reports] == [("bf16", snap.id)]


def test_adopt_local_dir_download(store: ModelStore, tmp_path: Path) -> None:
    local = make_model(tmp_path / "Qwen2.5-VL-7B-Instruct-AWQ")
    with pytest.raises(StoreError, match="pass --model-id"):
        store.adopt(local)
    [report] = store.adopt(local, model_id=MODEL)
    assert report.revision == "master"
    assert store.resolve(MODEL, "master") == report.snapshot
