"""A batch's ``oss://`` images against our signature-verifying OSS server: read with the
batch's own keys from the tenant's prefix, every failure a typed row error naming the
image, keys checked before any row, and no secret in an error or a log line."""

from __future__ import annotations

import json
import logging

import pytest

from qwen_ui.auth.principal import OSSCredentials
from qwen_ui.batch.errors import (
    OssKeyRejected,
    OssKeysExpired,
    OssKeysRefused,
    OssObjectDenied,
    OssObjectMissing,
    OssObjectTooLarge,
    OssTenantMissing,
    OssUnreachable,
)
from qwen_ui.batch.oss import OssImages, credentials_from_env, location_from_me, needs_oss
from qwen_ui.batch.rows import Row
from qwen_ui.errors import QwenUIError
from tests.auth.conftest import (
    ACME,
    ACME_NO_RIGHTS,
    ACME_OBJECTS,
    ACME_STS,
    BUCKET,
    REGION,
    Keys,
)
from tests.batch.conftest import reader
from tests.support.oss_server import FakeOSS


def test_credentials_come_from_the_environment() -> None:
    assert credentials_from_env({}) is None
    assert credentials_from_env({"OSS_ACCESS_KEY_ID": "LTAIx"}) is None
    assert credentials_from_env({"OSS_ACCESS_KEY_ID": " ", "OSS_ACCESS_KEY_SECRET": "s"}) is None
    env = {"OSS_ACCESS_KEY_ID": "LTAIx", "OSS_ACCESS_KEY_SECRET": "s3cret"}
    assert credentials_from_env(env) == OSSCredentials("LTAIx", "s3cret")
    sts = credentials_from_env({**env, "OSS_SESSION_TOKEN": "tok"})
    assert sts is not None and sts.sts_token == "tok"
    assert "s3cret" not in repr(sts) and "tok" not in repr(sts)


def test_only_rows_still_to_run_need_oss() -> None:
    on_oss = Row(1, "a", "Q", ("oss://acme/cat.png",))
    on_disk = Row(2, "b", "Q", ("/tmp/x.png",))
    broken = Row(3, "c", "", ("oss://acme/cat.png",), OssTenantMissing(problem="x"))
    assert needs_oss([on_oss, on_disk], set())
    assert not needs_oss([on_oss, on_disk], {"a"})
    assert not needs_oss([on_disk, broken], set())


def test_the_location_comes_from_the_servers_me() -> None:
    found = {"region": REGION, "endpoint": "https://oss.example.com", "bucket": BUCKET}
    me = {"tenant": "acme", "oss": {**found, "prefix": "acme/"}}
    assert location_from_me(me, allow_insecure=False).prefix == "acme/"
    with pytest.raises(OssTenantMissing, match="tenant school of the server has no OSS"):
        location_from_me({"tenant": "school"}, allow_insecure=False)
    with pytest.raises(OssTenantMissing, match="cannot use"):
        location_from_me({"oss": {**found, "prefix": "../"}}, allow_insecure=False)
    plain = {"oss": {**found, "endpoint": "http://127.0.0.1:9", "prefix": ""}}
    with pytest.raises(OssTenantMissing, match="not https://"):
        location_from_me(plain, allow_insecure=False)
    assert location_from_me(plain, allow_insecure=True).endpoint == "http://127.0.0.1:9"
    remote = {"oss": {**found, "endpoint": "http://oss.example.com", "prefix": ""}}
    with pytest.raises(OssTenantMissing, match="not https://"):
        location_from_me(remote, allow_insecure=True)


async def test_objects_are_read_with_the_batchs_keys(oss: FakeOSS) -> None:
    images = reader(oss, ACME)
    await images.check()
    assert await images.read(1, "oss://acme/cat.png") == ACME_OBJECTS["acme/cat.png"]
    sts = reader(oss, ACME_STS)
    await sts.check()
    assert await sts.read(2, "oss://acme/photos/dog.jpg") == ACME_OBJECTS["acme/photos/dog.jpg"]


async def expect(images: OssImages, ref: str, error: type[QwenUIError]) -> QwenUIError:
    with pytest.raises(error) as caught:
        await images.read(3, ref)
    message = caught.value.message("en")
    assert "Image 3" in message and ref in message
    assert caught.value.message("zh").startswith(("第 3 张", "无法读取第 3 张"))
    return caught.value


async def test_each_failure_is_a_typed_row_error_naming_the_image(oss: FakeOSS) -> None:
    images = reader(oss, ACME, max_bytes=1024)
    await expect(images, "oss://acme/nope.png", OssObjectMissing)
    await expect(images, "oss://acme/photos/big.jpg", OssObjectTooLarge)
    await expect(reader(oss, ACME_NO_RIGHTS), "oss://acme/cat.png", OssObjectDenied)


@pytest.mark.parametrize(
    "ref", ["oss://beta/secret-plan.png", "oss://acme/../beta/secret-plan.png", "oss://"]
)
async def test_keys_outside_the_prefix_are_refused_unasked(oss: FakeOSS, ref: str) -> None:
    error = await expect(reader(oss, ACME), ref, OssKeyRejected)
    assert error.params["reason"]
    assert oss.calls() == []


async def test_keys_oss_refuses_stop_the_batch_with_the_cause(oss: FakeOSS) -> None:
    wrong = Keys(ACME.key_id, "not-the-secret-0001-abcdefghijkl")
    with pytest.raises(OssKeysRefused, match="SignatureDoesNotMatch") as caught:
        await reader(oss, wrong).check()
    assert wrong.secret not in json.dumps(caught.value.to_dict())
    with pytest.raises(OssKeysRefused, match="AccessDenied"):
        await reader(oss, ACME_NO_RIGHTS).check()


async def test_keys_that_expire_mid_run(oss: FakeOSS) -> None:
    expired = Keys("STS.acmeExpired0001", "acme-sts-secret-expired-abcdefgh", "sts-" + "E" * 60)
    oss.add_key(
        expired.key_id, expired.secret, {BUCKET: ["acme/"]}, expired.sts_token, oss.now() - 1
    )
    await expect(reader(oss, expired), "oss://acme/cat.png", OssKeysExpired)


async def test_an_unreachable_oss(oss: FakeOSS) -> None:
    images = reader(oss, ACME)
    oss.stop()
    await expect(images, "oss://acme/cat.png", OssUnreachable)
    with pytest.raises(OssKeysRefused, match="Unreachable"):
        await images.check()


async def test_no_secret_in_any_log_line(oss: FakeOSS, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    images = reader(oss, ACME_STS)
    await images.check()
    await images.read(1, "oss://acme/cat.png")
    with pytest.raises(OssObjectMissing):
        await images.read(1, "oss://acme/nope.png")
    assert ACME_STS.secret not in caplog.text
    assert ACME_STS.sts_token is not None and ACME_STS.sts_token not in caplog.text
