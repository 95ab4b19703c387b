"""Loading a row's images: files here, ``oss://`` objects through the batch's reader,
typed errors naming the image for what cannot be read."""

from __future__ import annotations

from pathlib import Path

import pytest

from qwen_ui.batch.errors import ImageFileMissing, OssNotConfigured, OssObjectMissing
from qwen_ui.batch.runner import load_images
from tests.auth.conftest import ACME_OBJECTS
from tests.batch.conftest import reader
from tests.support.oss_server import FakeOSS


async def test_files_and_objects_in_the_rows_order(oss: FakeOSS, tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(b"file a")
    got = await load_images([str(tmp_path / "a.png"), "oss://acme/cat.png"], reader(oss))
    assert got == [b"file a", ACME_OBJECTS["acme/cat.png"]]


async def test_what_cannot_be_read_names_its_image(oss: FakeOSS, tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(b"file a")
    first = str(tmp_path / "a.png")
    with pytest.raises(ImageFileMissing, match="Image 2"):
        await load_images([first, str(tmp_path / "gone.png")], reader(oss))
    with pytest.raises(OssObjectMissing, match="Image 2"):
        await load_images([first, "oss://acme/gone.png"], reader(oss))
    with pytest.raises(OssNotConfigured, match="Image 1"):
        await load_images(["oss://acme/cat.png"], None)
