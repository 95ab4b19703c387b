"""Model store benchmark: install, fast verify and full verify of a multi-GB snapshot,
beside ``cat files > /dev/null`` over the same files in the same run.

    python bench/bench_store.py [--dir DIR] [--files 20] [--total-gib 4] [--sparse]

Builds a 20-file model (random data by default; ``--sparse`` makes holes instead, which
read as zeros without touching the disk), installs it into a fresh store under DIR, then
measures, warm (pages in the page cache) and cold (each file's pages dropped with
``posix_fadvise(DONTNEED)``, which needs no privileges and works for clean pages; checked
with ``fincore`` when present):

* ``resolve`` and fast ``verify`` (sizes, no hashing): median and worst of many runs;
* full ``verify`` (sha256 of every file, thread pool) and a one-thread full verify;
* ``cat <files> > /dev/null`` over the snapshot's files.

Each full read runs ``--runs`` times (default 3): the median, and the range in brackets.

Prints a Markdown block for docs/BENCHMARKS.md. DIR must be on the file system to measure
(default: a temp dir under ./artifacts).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from qwen_ui.store import ModelStore, fsutil

MODEL = "bench/store-snapshot"
MiB = 1024 * 1024


def make_source(src: Path, files: int, total: int, sparse: bool) -> list[Path]:
    """``files`` files summing to ``total`` bytes, sizes uneven like real shards."""
    rng = random.Random(0)
    weights = [rng.uniform(0.2, 1.8) for _ in range(files)]
    sizes = [int(total * w / sum(weights)) for w in weights]
    block = os.urandom(16 * MiB)
    paths = []
    for i, size in enumerate(sizes):
        path = src / f"model-{i + 1:05d}-of-{files:05d}.safetensors"
        with open(path, "wb") as f:
            if sparse:
                f.truncate(size)
            else:
                left = size
                while left:
                    n = min(left, len(block))
                    # vary the block so no two chunks are equal (no dedup anywhere)
                    f.write(hashlib.sha256(f"{i}:{left}".encode()).digest() + block[32:n])
                    left -= n
        paths.append(path)
    return paths


def evict(paths: list[Path]) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def cached_fraction(paths: list[Path]) -> float | None:
    """Share of the files' pages in the page cache, from util-linux ``fincore``."""
    if not shutil.which("fincore"):
        return None
    out = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--output", "RES,SIZE", *map(str, paths)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    res = size = 0
    for line in out.splitlines():
        r, s = line.split()
        res, size = res + int(r), size + int(s)
    return res / size if size else None


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def cat(paths: list[Path]) -> None:
    with open(os.devnull, "wb") as null:
        subprocess.run(["cat", *map(str, paths)], stdout=null, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--total-gib", type=float, default=4.0)
    parser.add_argument("--sparse", action="store_true")
    parser.add_argument("--repeat", type=int, default=200, help="fast verify runs")
    parser.add_argument(
        "--runs",
        type=int,
        default=3,
        help="runs of each full read (median reported, range in brackets)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    args = parser.parse_args()

    base = args.dir or Path(__file__).resolve().parent.parent / "artifacts"
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-store-", dir=base))
    try:
        return run(args, work)
    finally:
        if not args.keep:
            fsutil.rmtree(work)  # the snapshot is read-only; this makes it writable first


def run(args: argparse.Namespace, work: Path) -> int:
    load_start = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    total = int(args.total_gib * 1024**3)
    src = work / "src"
    src.mkdir()
    t = timed(lambda: make_source(src, args.files, total, args.sparse))
    print(
        f"generated {args.files} files, {total / 1e9:.2f} GB "
        f"({'sparse' if args.sparse else 'random data'}) in {t:.1f} s",
        file=sys.stderr,
    )

    store = ModelStore(work / "store")
    install_s = timed(lambda: store.install(src, MODEL, "master"))
    shutil.rmtree(src)  # only the snapshot stays, so the two runs below read the same bytes
    snap = store.resolve(MODEL, "master")
    paths = [snap.path / e.path for e in snap.manifest.files]
    size = snap.manifest.total_size

    def fast_runs(fn: Callable[[], object]) -> tuple[float, float]:
        runs = [timed(fn) for _ in range(args.repeat)]
        return statistics.median(runs) * 1e3, max(runs) * 1e3

    resolve_ms = fast_runs(lambda: store.resolve(MODEL, "master"))
    verify_ms = fast_runs(lambda: store.verify(MODEL, "master"))

    one_thread = ModelStore(store.root, workers=1)
    rows: list[tuple[str, str, list[float], float | None]] = []
    for state in ("warm", "cold"):
        for name, fn in (
            ("cat files > /dev/null", lambda: cat(paths)),
            ("verify --full (thread pool)", lambda: store.verify(MODEL, "master", full=True)),
            ("verify --full (1 thread)", lambda: one_thread.verify(MODEL, "master", full=True)),
        ):
            times, cached = [], []
            for _ in range(args.runs):
                if state == "cold":
                    evict(paths)
                else:
                    cat(paths)  # make sure the pages are in
                cached.append(cached_fraction(paths))
                times.append(timed(fn))
            known = [c for c in cached if c is not None]
            rows.append((state, name, times, max(known) if known else None))

    fs = (
        subprocess.run(
            ["findmnt", "-no", "FSTYPE,SOURCE", "-T", str(work)], capture_output=True, text=True
        ).stdout.strip()
        or "?"
    )
    sha = hashlib.sha256()
    buf = os.urandom(64 * MiB)
    sha_s = timed(lambda: [sha.update(buf) for _ in range(8)])
    print(
        f"\nmachine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"{_cpu_model()}; file system: {fs}; python {platform.python_version()}"
    )
    print(
        f"sha256 on one core: {8 * 64 * MiB / sha_s / 1e6:.0f} MB/s; load average at the "
        f"start {load_start}, at the end {', '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    print(
        f"snapshot: {len(paths)} files, {size / 1e9:.2f} GB "
        f"({'sparse' if args.sparse else 'random data'})\n"
    )
    print(f"| operation | cache | time (median) | throughput (median, range of {args.runs}) |")
    print("| --- | --- | --- | --- |")
    print(
        f"| install (copy + sha256 + fsync) | source just written | {install_s:.2f} s "
        f"| {size / install_s / 1e6:.0f} MB/s |"
    )
    print(
        f"| resolve (ref + manifest + sizes) | — | median {resolve_ms[0]:.2f} ms, "
        f"max {resolve_ms[1]:.2f} ms | — |"
    )
    print(
        f"| verify (fast: sizes, no extra files) | — | median {verify_ms[0]:.2f} ms, "
        f"max {verify_ms[1]:.2f} ms | — |"
    )
    for state, name, times, cached in rows:
        note = f"{state} ({cached:.0%} cached before)" if cached is not None else state
        rates = sorted(size / t / 1e6 for t in times)
        spread = f" ({rates[0]:.0f}–{rates[-1]:.0f})" if len(rates) > 1 else ""
        print(
            f"| {name} | {note} | {statistics.median(times):.2f} s "
            f"| {statistics.median(rates):.0f} MB/s{spread} |"
        )
    return 0


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "?"


if __name__ == "__main__":
    sys.exit(main())
