"""The batch suite's OSS: our signature-verifying server with the auth suite's world."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.auth.conftest import make_oss
from tests.support.oss_server import FakeOSS


@pytest.fixture
def oss() -> Iterator[FakeOSS]:
    server = make_oss()
    yield server
    server.stop()
