"""Hole 8 of issue 26: a Gradio upload is private to the principal that uploaded it."""

from __future__ import annotations

import io

import httpx
import pytest
from PIL import Image

from tests.security.conftest import Site

pytestmark = pytest.mark.e2e


def _png(seed: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), (seed % 256, 80, 160)).save(buffer, format="PNG")
    return buffer.getvalue()


def _upload(client: httpx.Client, data: bytes) -> str:
    response = client.post("/gradio_api/upload", files={"files": ("shape.png", data, "image/png")})
    assert response.status_code == 200, response.text
    paths = response.json()
    assert len(paths) == 1
    return str(paths[0])


def test_other_tenants_and_users_cannot_read_an_upload(site: Site) -> None:
    alice = site.user("acme", "alice")
    path = _upload(alice, _png(hash(site.backend) % 200))
    assert alice.get(f"/gradio_api/file={path}").status_code == 200
    for other in (site.user("acme", "bob"), site.user("demo", "demo")):
        response = other.get(f"/gradio_api/file={path}")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"


def test_the_same_bytes_uploaded_by_two_owners_serve_both(site: Site) -> None:
    data = _png(201 + len(site.backend))
    alice, demo = site.user("acme", "alice"), site.user("demo", "demo")
    path = _upload(alice, data)
    assert _upload(demo, data) == path  # Gradio names uploads by their bytes
    assert alice.get(f"/gradio_api/file={path}").status_code == 200
    assert demo.get(f"/gradio_api/file={path}").status_code == 200
    assert site.user("acme", "bob").get(f"/gradio_api/file={path}").status_code == 404


def test_uploads_land_in_the_configured_folder(site: Site) -> None:
    path = _upload(site.user("acme", "alice"), _png(77 + len(site.backend)))
    assert path.startswith(str(site.uploads.resolve()))
