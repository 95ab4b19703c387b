"""Point 3 of issue 57: images under the pixel cap were decoded whole before anything
counted them. Two 49-megapixel PNGs (a few hundred KB each, a flat colour) asked at once
must raise the real server's resident memory by at most 1 GiB once the model is loaded,
or be refused with the typed error before they are decoded."""

from __future__ import annotations

import io
import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import httpx
import pytest
from PIL import Image

from tests.security.conftest import Site

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
log = logging.getLogger(__name__)

GiB = 1024**3
SIDE = 7000  # 49 million pixels: under the server's default pixel cap (50 million)
REFUSED = "image_decode_budget"


def png(side: int, colour: tuple[int, int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (side, side), colour).save(buffer, format="PNG", compress_level=9)
    return buffer.getvalue()


@dataclass(frozen=True)
class Answer:
    status: int
    last: dict[str, object]  # the JSON error, or the stream's last line

    @property
    def code(self) -> str:
        error = self.last.get("error")
        return str(error.get("code")) if isinstance(error, dict) else ""


def ask(site: Site, data: bytes) -> Answer:
    """One question about ``data`` with the site's API token, read to its end."""
    headers = {"Authorization": f"Bearer {site.token}"}
    form = {"question": "What shape is this?", "max_new_tokens": "4"}
    files = {"images": ("big.png", data, "image/png")}
    with (
        httpx.Client(base_url=site.url, timeout=600) as client,
        client.stream("POST", "/api/v1/ask", data=form, files=files, headers=headers) as reply,
    ):
        lines = [line for line in reply.iter_lines() if line.strip()]
    return Answer(reply.status_code, json.loads(lines[-1]) if lines else {})


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def reset_peak(pid: int) -> bool:
    """Reset the process's peak resident size (VmHWM) to its current one (Linux >= 4.0)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


class PeakRss:
    """The highest resident size of ``pid`` while the block runs: VmHWM after a reset of
    the peak, or else (no permission) the highest VmRSS of frequent samples."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._exact = False

    def __enter__(self) -> PeakRss:
        self._exact = reset_peak(self.pid)
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        if self._exact:
            self.peak_kib = max(self.peak_kib, status_kib(self.pid, "VmHWM"))

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak_kib = max(self.peak_kib, status_kib(self.pid, "VmRSS"))


def test_two_big_pngs_at_once_stay_within_a_gib_or_are_refused(memory_site: Site) -> None:
    site = memory_site
    big = [png(SIDE, (200, 40, 40)), png(SIDE, (40, 40, 200))]
    assert all(len(data) <= site.settings.max_image_bytes for data in big)
    assert site.settings.max_image_pixels >= SIDE * SIDE  # admitted by the pixel cap
    warm = ask(site, png(64, (10, 180, 10)))  # loads the model first
    assert warm.status == 200 and warm.last.get("type") == "done", warm
    pid = site.server.proc.pid
    base_kib = status_kib(pid, "VmRSS")
    with PeakRss(pid) as peak, ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda data: ask(site, data), big))
    rise = (peak.peak_kib - base_kib) * 1024
    log.info("resident memory rose by %.2f GiB: %s", rise / GiB, [a.status for a in answers])
    refused = [a for a in answers if a.code == REFUSED]
    for answer in answers:
        assert answer in refused or answer.last.get("type") == "done", answer
    if len(refused) < len(answers):  # at least one was decoded
        assert rise <= GiB, f"resident memory rose by {rise / GiB:.2f} GiB"
    else:
        assert all(a.status == 413 for a in refused), answers
