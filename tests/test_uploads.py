"""The upload registry (qwen_ui/uploads.py) on both state backends: owners, forget, sweep."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from qwen_ui.auth.principal import Principal
from qwen_ui.state import State
from qwen_ui.uploads import UploadNotFound, UploadRegistry

ALICE = Principal("acme", "alice")
BOB = Principal("acme", "bob")
DEMO = Principal("demo", "demo")


def _file(folder: Path, name: str, data: bytes = b"png") -> Path:
    path = folder / name.split("/")[0] / name.split("/")[-1]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path / "gradio"
    path.mkdir()
    return path


async def test_an_upload_is_readable_by_its_owners_only(state: State, folder: Path) -> None:
    registry = UploadRegistry(state, folder, ttl_s=3600)
    path = _file(folder, "h1/a.png")
    await registry.record(ALICE, [str(path)])
    assert await registry.may_read(ALICE, path)
    assert not await registry.may_read(BOB, path)
    assert not await registry.may_read(DEMO, str(folder / "h1" / ".." / "h1" / "a.png"))
    with pytest.raises(UploadNotFound):
        await registry.check(DEMO, [str(path)])
    await registry.record(DEMO, [str(path)])  # the same bytes uploaded again
    await registry.check(DEMO, [str(path)])


async def test_files_outside_the_folder_or_unrecorded_are_nobodys(
    state: State, folder: Path, tmp_path: Path
) -> None:
    registry = UploadRegistry(state, folder, ttl_s=3600)
    stray = _file(folder, "h2/stray.png")
    assert not await registry.may_read(BOB, stray)
    elsewhere = tmp_path / "elsewhere.png"
    elsewhere.write_bytes(b"png")
    assert not await registry.may_read(BOB, elsewhere)
    await registry.record(ALICE, [str(elsewhere)])  # outside the folder: never recorded
    assert not await registry.may_read(ALICE, elsewhere)
    assert not await registry.may_read(ALICE, folder / "h2")  # a folder is not a file


async def test_the_pages_own_files_are_everyones_and_never_swept(
    state: State, folder: Path
) -> None:
    registry = UploadRegistry(state, folder, ttl_s=60)
    example = _file(folder, "h7/example.png")
    registry.share([str(example), "/etc/hostname"])  # outside the folder: ignored
    assert await registry.may_read(BOB, example) and await registry.may_read(DEMO, example)
    assert not await registry.may_read(BOB, "/etc/hostname")
    an_hour_ago = time.time() - 3600
    os.utime(example, (an_hour_ago, an_hour_ago))
    assert registry.sweep() == 0 and example.exists()


async def test_forget_deletes_a_file_nobody_else_owns(state: State, folder: Path) -> None:
    registry = UploadRegistry(state, folder, ttl_s=3600)
    shared, own = _file(folder, "h3/s.png"), _file(folder, "h4/o.png")
    await registry.record(ALICE, [str(shared), str(own)])
    await registry.record(DEMO, [str(shared)])
    await registry.forget(ALICE, [str(shared), str(own)])
    assert not own.exists() and not own.parent.exists()
    assert shared.exists()
    assert not await registry.may_read(ALICE, shared)
    assert await registry.may_read(DEMO, shared)
    await registry.forget(BOB, [str(shared)])  # not Bob's: nothing happens
    assert shared.exists()


def test_sweep_deletes_files_older_than_the_ttl(state: State, folder: Path) -> None:
    registry = UploadRegistry(state, folder, ttl_s=60)
    old, new = _file(folder, "h5/old.png"), _file(folder, "h6/new.png")
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    assert registry.sweep() == 1
    assert not old.exists() and not old.parent.exists()
    assert new.exists()
    assert registry.sweep(now=time.time() + 120) == 1
    assert not new.exists()


def test_the_sweep_interval_follows_the_ttl(state: State, folder: Path) -> None:
    assert UploadRegistry(state, folder, ttl_s=60).sweep_interval_s == 15
    assert UploadRegistry(state, folder, ttl_s=86400).sweep_interval_s == 600
