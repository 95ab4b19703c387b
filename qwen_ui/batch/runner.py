"""Running a batch: the rows not yet in the output, ``concurrency`` at a time, each written
as it finishes; a row's failure is its output line, never the end of the run."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from qwen_ui.batch.askers import Answered, Asker, error_dict
from qwen_ui.batch.errors import ImageFileMissing, OssNotConfigured
from qwen_ui.batch.oss import OssImages
from qwen_ui.batch.output import Output, RowResult
from qwen_ui.batch.rows import OSS_SCHEME, Row
from qwen_ui.errors import QwenUIError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Summary:
    rows: int  # in the input
    skipped: int  # already in the output
    answered: int
    failed: int
    seconds: float

    @property
    def rate(self) -> float:
        """Rows run per second (answered or failed)."""
        return (self.answered + self.failed) / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        return (
            f"rows {self.rows}, done before {self.skipped}, answered {self.answered}, "
            f"failed {self.failed}, {self.seconds:.1f} s, {self.rate:.2f} rows/s"
        )


class Progress:
    """A progress bar on ``stream``: redrawn in place on a terminal, else a line at every
    tenth of the rows."""

    WIDTH = 30

    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.total = total
        self.stream = stream or sys.stderr
        self.enabled = enabled and total > 0
        self.done = self.failed = 0
        self.started = time.perf_counter()
        self.tty = self.stream.isatty()

    def update(self, failed: bool) -> None:
        self.done += 1
        self.failed += int(failed)
        if not self.enabled:
            return
        step = max(1, self.total // 10)
        if self.tty:
            self.stream.write("\r" + self.render())
        elif self.done % step == 0 or self.done == self.total:
            self.stream.write(self.render() + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def render(self) -> str:
        filled = round(self.WIDTH * self.done / self.total)
        elapsed = time.perf_counter() - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else 0.0
        bar = "#" * filled + "." * (self.WIDTH - filled)
        return (
            f"[{bar}] {self.done}/{self.total} · {self.failed} failed · "
            f"{rate:.1f} rows/s · {eta:.0f} s left"
        )


async def run_batch(
    rows: Sequence[Row],
    asker: Asker,
    output: Output,
    done: set[str],
    concurrency: int = 4,
    limit: int | None = None,
    progress: Progress | None = None,
    lang: str = "en",
    oss: OssImages | None = None,
) -> Summary:
    """Run every row whose key is not in ``done`` (at most ``limit`` of them); ``oss``
    reads their ``oss://`` images."""
    todo = [row for row in rows if row.key not in done]
    skipped = len(rows) - len(todo)
    todo = todo[:limit] if limit is not None else todo
    progress = progress or Progress(len(todo), enabled=False)
    queue: asyncio.Queue[Row] = asyncio.Queue()
    for row in todo:
        queue.put_nowait(row)
    counts = {"answered": 0, "failed": 0}
    started = time.perf_counter()

    async def work() -> None:
        while not queue.empty():
            result = await run_row(queue.get_nowait(), asker, lang, oss)
            output.write(result)
            counts["failed" if result.error else "answered"] += 1
            progress.update(result.error is not None)

    await asyncio.gather(*(work() for _ in range(max(1, concurrency))))
    progress.finish()
    seconds = time.perf_counter() - started
    return Summary(len(rows), skipped, counts["answered"], counts["failed"], seconds)


async def run_row(row: Row, asker: Asker, lang: str, oss: OssImages | None = None) -> RowResult:
    start = time.perf_counter()
    answered = await _answer(row, asker, lang, oss)
    timings = {**answered.timings, "row": round(time.perf_counter() - start, 4)}
    return RowResult(row, answered.answer, answered.boxes, timings, answered.error)


async def _answer(row: Row, asker: Asker, lang: str, oss: OssImages | None) -> Answered:
    try:
        if row.problem is not None:
            raise row.problem
        images = await load_images(row.images, oss)
        return await asker.ask(row.question, images)
    except QwenUIError as exc:
        return Answered(error=error_dict(exc, lang))
    except Exception:  # a bug must not end the run: the row says so, the log says why
        log.exception("row %s failed", row.id)
        return Answered(error=error_dict(QwenUIError(), lang))


async def load_images(images: Sequence[str], oss: OssImages | None = None) -> list[bytes]:
    """The bytes of each image, files here and ``oss://`` objects through ``oss``; typed
    errors for what cannot be read."""
    out = []
    for index, image in enumerate(images, start=1):
        if not image.startswith(OSS_SCHEME):
            out.append(await asyncio.to_thread(read_file, index, image))
        elif oss is None:
            raise OssNotConfigured(index=index, key=image)
        else:
            out.append(await oss.read(index, image))
    return out


def read_file(index: int, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ImageFileMissing(index=index, path=path) from exc
