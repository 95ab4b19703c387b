"""Loading a row's images: files here, ``oss://`` objects through the batch's reader,
typed errors naming the image for what cannot be read."""

from __future__ import annotations

from pathlib import Path

import pytest

from qwen_ui.auth.principal import OSSCredentials
from qwen_ui.auth.tenants import OSSConfig
from qwen_ui.batch.errors import ImageFileMissing, OssNotConfigured, OssObjectMissing
from qwen_ui.batch.oss import OssImages
from qwen_ui.batch.runner import load_images
from tests.auth.conftest import ACME, ACME_OBJECTS, BUCKET, REGION
from tests.support.oss_server import FakeOSS


def reader(oss: FakeOSS) -> OssImages:
    config = OSSConfig(region=REGION, endpoint=oss.endpoint, bucket=BUCKET, prefix="acme/")
    return OssImages.open(config, OSSCredentials(ACME.key_id, ACME.secret), 2.0, 1 << 20)


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
