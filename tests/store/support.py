"""Helpers for the store tests: generated model folders and a child-process installer."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

from qwen_ui.store import ModelStore

REPO = Path(__file__).resolve().parents[2]


def make_model(path: Path, files: dict[str, bytes] | None = None, seed: int = 0) -> Path:
    """A folder of model-like files; ``seed`` changes the content, not the sizes."""
    files = files if files is not None else model_files(seed)
    for rel, data in files.items():
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return path


def model_files(seed: int = 0, big: int = 0) -> dict[str, bytes]:
    files = {
        "config.json": b'{"model_type": "qwen2_5_vl", "seed": %d}' % seed,
        "tokenizer.json": b'{"version": "1.0", "seed": %d}' % seed,
        "model-00001-of-00002.safetensors": bytes([seed % 256]) * 40_000,
        "model-00002-of-00002.safetensors": bytes([(seed + 1) % 256]) * 30_000,
        "sub/dir/preprocessor_config.json": b"{}",
    }
    if big:
        files["model-big.safetensors"] = random.Random(seed).randbytes(1024) * (big // 1024)
    return files


def snapshot_dirs(store: ModelStore, model_id: str) -> list[str]:
    snapshots = store.layout.snapshots_dir(model_id)
    return sorted(p.name for p in snapshots.iterdir()) if snapshots.exists() else []


def temp_entries(store: ModelStore) -> list[str]:
    tmp = store.layout.tmp
    return sorted(p.name for p in tmp.iterdir()) if tmp.exists() else []


# A child process that installs and can be stopped at a chosen point: it writes "paused"
# to a signal file and sleeps, so the parent can SIGKILL it at exactly that point.
CHILD = r"""
import os, sys, time
from pathlib import Path
from qwen_ui.store import ModelStore, fsutil

root, src, model_id, revision, phase, signal = sys.argv[1:7]
barrier = sys.argv[7:]  # files that must all exist before copying goes on

def pause():
    Path(signal).write_text("paused")
    time.sleep(3600)

progress = None
if phase == "copy":
    progress = lambda done, total: pause()
elif phase == "barrier":
    def progress(done, total, _seen=[]):
        if _seen:
            return
        _seen.append(1)
        Path(signal).write_text("at barrier")
        deadline = time.monotonic() + 60
        while not all(Path(b).exists() for b in barrier):
            if time.monotonic() > deadline:
                raise SystemExit("barrier timeout")
            time.sleep(0.005)
elif phase == "after-dir-rename":
    real_rename = os.rename
    def rename(a, b):
        real_rename(a, b)
        if Path(b).parent.name == "snapshots":
            pause()
    os.rename = rename
elif phase == "before-ref":
    fsutil.atomic_write = lambda *a, **k: pause()
elif phase == "ref-temp-written":
    real_replace = os.replace
    os.replace = lambda a, b: pause()

ModelStore(root).install(src, model_id, revision, progress)
print("done")
"""


def start_child(
    root: Path,
    src: Path,
    model_id: str,
    revision: str,
    phase: str,
    signal: Path,
    barrier: list[Path] | None = None,
) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            str(root),
            str(src),
            model_id,
            revision,
            phase,
            str(signal),
            *map(str, barrier or []),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 60.0) -> None:
    """Until ``path`` exists (the child reached its pause point), failing if it died."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            _out, err = proc.communicate()
            raise AssertionError(f"child exited {proc.returncode} before pausing:\n{err}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.communicate()
            raise AssertionError(f"child did not reach {path.name} in {timeout} s")
        time.sleep(0.005)
