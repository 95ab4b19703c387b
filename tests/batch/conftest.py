"""The batch suite's OSS: our signature-verifying server with the auth suite's world."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from qwen_ui.auth.principal import OSSCredentials
from qwen_ui.auth.tenants import OSSConfig
from qwen_ui.batch.oss import OssImages
from tests.auth.conftest import ACME, BUCKET, REGION, Keys, make_oss
from tests.support.oss_server import FakeOSS


@pytest.fixture
def oss() -> Iterator[FakeOSS]:
    server = make_oss()
    yield server
    server.stop()


def reader(oss: FakeOSS, keys: Keys = ACME, max_bytes: int = 1 << 20) -> OssImages:
    """The batch's reader of the acme tenant's prefix, with ``keys``."""
    config = OSSConfig(region=REGION, endpoint=oss.endpoint, bucket=BUCKET, prefix="acme/")
    credentials = OSSCredentials(keys.key_id, keys.secret, keys.sts_token)
    return OssImages.open(config, credentials, 2.0, max_bytes)
