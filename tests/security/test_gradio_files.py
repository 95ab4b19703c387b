"""Hole 1 of the second review (critical): a history, file or image value sent to a Gradio
event that names a server path must never bring that file back.

The events come from the app's own ``/config``: every event whose inputs include a
component that can carry a file (chatbot, file, image, gallery, the question box...) is
sent values naming a canary file outside the uploads, so an event added later is covered
without editing this test."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest

from tests.security.conftest import Site
from tests.support.gradio_queue import events_taking, hostile_value, paths_in, run_event

pytestmark = pytest.mark.e2e


def _canary(site: Site) -> tuple[Path, bytes]:
    """A file the server process can read, outside Gradio's upload folder."""
    marker = f"canary-{secrets.token_hex(16)}".encode()
    path = site.server.home / f"canary-{secrets.token_hex(4)}.png"
    path.write_bytes(marker)
    return path, marker


def _copies(folder: Path, marker: bytes) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and marker in p.read_bytes()]


def test_every_file_taking_event_refuses_a_server_path(memory_site: Site) -> None:
    user = memory_site.user()
    config = user.get("/config").json()
    events = events_taking(config)
    assert events, "the page has events taking chatbot, file or image values"
    canary, marker = _canary(memory_site)
    targets = [str(canary), "/etc/hostname", "/proc/self/environ"]
    seen: list[Any] = []
    for event in events:
        for target in targets:
            data = [hostile_value(c, target) for c in event.inputs]
            reply = run_event(user, event, data)
            assert marker.decode() not in reply.text, (event, target)
            seen += [json.loads(m) if isinstance(m, str) else m for m in reply.messages]
    assert _copies(memory_site.uploads, marker) == [], "the canary was copied into the uploads"
    for path in set(paths_in(seen)):  # whatever the events named back: never the canary
        got = user.get(f"/gradio_api/file={path}")
        assert marker not in got.content, path


def test_file_route_serves_no_server_path(site: Site) -> None:
    user = site.user()
    canary, _ = _canary(site)
    for path in (str(canary), "/etc/hostname", "/proc/self/environ", str(site.uploads)):
        assert user.get(f"/gradio_api/file={path}").status_code == 404, path


def test_file_route_serves_only_the_uploaders_files(site: Site) -> None:
    alice, bob = site.user("acme", "alice"), site.user("acme", "bob")
    data = b"\x89PNG\r\n\x1a\n" + secrets.token_bytes(64)
    uploaded = alice.post("/gradio_api/upload", files={"files": ("mine.png", data, "image/png")})
    assert uploaded.status_code == 200, uploaded.text
    (path,) = uploaded.json()
    assert alice.get(f"/gradio_api/file={path}").content == data
    assert bob.get(f"/gradio_api/file={path}").status_code == 404
    # a file Gradio's folder holds that nobody uploaded is nobody's
    stray = Path(path).parent.parent / secrets.token_hex(8) / "stray.png"
    stray.parent.mkdir()
    stray.write_bytes(data)
    assert alice.get(f"/gradio_api/file={stray}").status_code == 404
