"""Point 5 of issue 57: a multipart body must end with its closing boundary. The closing
delimiter found anywhere (inside an image's bytes) does not make a cut-off body whole:
its last part would be dropped silently (the parser never sees that part's end)."""

from __future__ import annotations

import io
import json

import httpx
import pytest
from PIL import Image, PngImagePlugin

from tests.security.conftest import Site

pytestmark = pytest.mark.e2e

BOUNDARY = "qwenEndBoundary"
CLOSING = f"--{BOUNDARY}--".encode()


def _png_holding(text: bytes, colour: tuple[int, int, int]) -> bytes:
    """A valid PNG whose text chunk carries ``text`` (the closing delimiter, here)."""
    info = PngImagePlugin.PngInfo()
    info.add_text("Comment", text.decode())
    buffer = io.BytesIO()
    Image.new("RGB", (48, 48), colour).save(buffer, format="PNG", pnginfo=info)
    assert text in buffer.getvalue()
    return buffer.getvalue()


def _part(name: str, data: bytes, filename: str | None = None) -> bytes:
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
    kind = "Content-Type: image/png\r\n" if filename else ""
    head = f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n{kind}\r\n"
    return head.encode() + data + b"\r\n"


def _question() -> bytes:
    return _part("question", b"How many images?") + _part("max_new_tokens", b"1")


def _two_images(cut: bool) -> bytes:
    """A question, an image that holds the closing delimiter, then a second image: cut
    off in the middle of its bytes (no CRLF, no closing boundary), or complete."""
    first, second = _png_holding(CLOSING, (200, 30, 30)), _png_holding(b"x", (30, 30, 200))
    body = _question() + _part("images", first, "a.png")
    if cut:
        return body + _part("images", second, "b.png")[: -(len(second) // 2)]
    return body + _part("images", second, "b.png") + CLOSING + b"\r\n"


def _post(site: Site, body: bytes) -> httpx.Response:
    user = site.user()
    headers = {"content-type": f"multipart/form-data; boundary={BOUNDARY}"}
    return user.post("/api/v1/ask", content=body, headers=headers)


def test_cut_off_part_is_malformed_although_the_delimiter_is_in_the_data(
    memory_site: Site,
) -> None:
    body = _two_images(cut=True)
    assert CLOSING in body and not body.rstrip().endswith(CLOSING)
    response = _post(memory_site, body)
    assert response.status_code == 400, response.text[:500]
    assert response.json()["error"]["code"] == "malformed_body"
    assert memory_site.open_temp_files() == []


def test_the_same_body_closed_is_answered_with_both_images(memory_site: Site) -> None:
    """The control: whole, the same parts reach the engine, both images seen."""
    response = _post(memory_site, _two_images(cut=False))
    assert response.status_code == 200, response.text[:500]
    done = [json.loads(line) for line in response.text.splitlines() if line][-1]
    assert done["type"] == "done" and done["images"] == 2


@pytest.mark.parametrize("tail", [b"", b"\r\n", b"\r\n\r\n", b"  \r\n"])
def test_only_whitespace_may_follow_the_closing_boundary(memory_site: Site, tail: bytes) -> None:
    body = _question() + _part("images", _png_holding(b"x", (0, 90, 0)), "a.png")
    response = _post(memory_site, body + CLOSING + tail)
    assert response.status_code == 200, response.text[:500]


def test_data_after_the_closing_boundary_is_malformed(memory_site: Site) -> None:
    image = _part("images", _png_holding(b"x", (0, 90, 0)), "a.png")
    body = _question() + image + CLOSING + b"\r\n" + _part("images", b"late", "c.png")
    response = _post(memory_site, body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "malformed_body"
