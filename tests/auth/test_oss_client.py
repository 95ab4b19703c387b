"""oss2 against our OSS server: V4 and V1 signatures, STS, each failure classified, and
oss2's DEBUG logging (which carries the security token) kept at WARNING."""

from __future__ import annotations

import logging

import oss2
import oss2.exceptions
import pytest

from qwen_ui.auth.oss_client import OSSConnector, Outcome, classify, quiet_oss2_logging
from qwen_ui.auth.principal import OSSCredentials
from qwen_ui.auth.tenants import OSSConfig
from tests.auth.conftest import ACME, ACME_NO_RIGHTS, ACME_STS, BUCKET, REGION
from tests.conftest import free_port
from tests.support.oss_server import FakeOSS


def bucket(oss: FakeOSS, auth: object, name: str = BUCKET, region: str = REGION) -> oss2.Bucket:
    return oss2.Bucket(auth, oss.endpoint, name, region=region, connect_timeout=2)


AUTHS = {
    "v4": lambda k: oss2.AuthV4(k.key_id, k.secret),
    "v1": lambda k: oss2.Auth(k.key_id, k.secret),
    "sts-v4": lambda k: oss2.StsAuth(
        k.key_id, k.secret, k.sts_token, auth_version=oss2.AUTH_VERSION_4
    ),
    "sts-v1": lambda k: oss2.StsAuth(k.key_id, k.secret, k.sts_token),
}


@pytest.mark.parametrize("version", AUTHS)
def test_signatures_verify(oss: FakeOSS, version: str) -> None:
    keys = ACME_STS if version.startswith("sts") else ACME
    b = bucket(oss, AUTHS[version](keys))
    assert b.list_objects_v2(prefix="acme/", max_keys=1).object_list
    assert b.list_objects(prefix="acme/", max_keys=1).object_list
    assert b.get_object("acme/cat.png").read() == b"\x89PNG acme cat"
    assert b.head_object("acme/cat.png").content_length == len(b"\x89PNG acme cat")
    assert {c.version for c in oss.calls()} == {version.removeprefix("sts-")}


def failure(call: object) -> oss2.exceptions.OssError:
    with pytest.raises(oss2.exceptions.OssError) as caught:
        call()  # type: ignore[operator]
    return caught.value


def test_each_failure_is_classified(oss: FakeOSS) -> None:
    cases = {
        "InvalidAccessKeyId": bucket(oss, oss2.AuthV4("LTAInobody00000000", "x")),
        "SignatureDoesNotMatch": bucket(oss, oss2.AuthV4(ACME.key_id, "wrong")),
        "InvalidSecurityToken": bucket(
            oss, oss2.StsAuth(ACME_STS.key_id, ACME_STS.secret, "forged", auth_version="v4")
        ),
        "AccessDenied": bucket(oss, oss2.AuthV4(ACME_NO_RIGHTS.key_id, ACME_NO_RIGHTS.secret)),
        "NoSuchBucket": bucket(oss, oss2.AuthV4(ACME.key_id, ACME.secret), name="no-such-bucket"),
    }
    for code, b in cases.items():
        exc = failure(lambda b=b: b.list_objects_v2(prefix="acme/", max_keys=1))
        assert (exc.status, exc.code) == (403 if code != "NoSuchBucket" else 404, code)
        assert exc.request_id
        assert classify(exc) is Outcome.INVALID


def test_expired_token_skewed_clock_and_head_errors(oss: FakeOSS) -> None:
    sts = bucket(oss, oss2.StsAuth(ACME_STS.key_id, ACME_STS.secret, ACME_STS.sts_token, "v4"))
    oss.keys[ACME_STS.key_id].expires_at = oss.now() - 1
    exc = failure(lambda: sts.list_objects_v2(prefix="acme/"))
    assert exc.code == "SecurityTokenExpired" and classify(exc) is Outcome.INVALID
    oss.clock_offset = 3600
    exc = failure(
        lambda: bucket(oss, oss2.AuthV4(ACME.key_id, ACME.secret)).list_objects_v2(prefix="acme/")
    )
    assert exc.code == "RequestTimeTooSkewed" and classify(exc) is Outcome.UNAVAILABLE
    oss.clock_offset = 0
    good = bucket(oss, oss2.AuthV4(ACME.key_id, ACME.secret))
    exc = failure(lambda: good.head_object("acme/missing.png"))  # error XML via x-oss-err
    assert exc.code == "NoSuchKey" and classify(exc, for_object=True) is Outcome.NOT_FOUND
    exc = failure(lambda: good.head_object("beta/secret-plan.png"))
    assert exc.code == "AccessDenied" and classify(exc, for_object=True) is Outcome.DENIED


def test_wrong_region_does_not_verify(oss: FakeOSS) -> None:
    b = bucket(oss, oss2.AuthV4(ACME.key_id, ACME.secret), region="cn-elsewhere")
    assert failure(lambda: b.list_objects_v2(prefix="acme/")).code == "SignatureDoesNotMatch"


def test_unreachable_is_unavailable() -> None:
    config = OSSConfig(
        region=REGION, endpoint=f"http://127.0.0.1:{free_port()}", bucket=BUCKET, prefix="acme/"
    )
    b = OSSConnector(timeout_s=1).bucket(config, OSSCredentials(ACME.key_id, ACME.secret))
    exc = failure(lambda: b.list_objects_v2(prefix="acme/", max_keys=1))
    assert exc.status == -2 and classify(exc) is Outcome.UNAVAILABLE


def test_oss2_would_log_the_token_and_is_kept_quiet(
    oss: FakeOSS, caplog: pytest.LogCaptureFixture
) -> None:
    """oss2 logs request headers at DEBUG, the STS token among them; the server pins the
    oss2 loggers to WARNING so that never happens."""
    token = "canary-sts-token-never-logged"  # not in the suite's watch list on purpose
    oss.add_key("STS.canary000001", "canary-secret", {BUCKET: ["acme/"]}, sts_token=token)
    b = bucket(oss, oss2.StsAuth("STS.canary000001", "canary-secret", token, "v4"))
    for name in ("oss2", "oss2.http", "oss2.api", "oss2.auth"):
        caplog.set_level(logging.DEBUG, logger=name)
    b.list_objects_v2(prefix="acme/", max_keys=1)
    assert token in caplog.text  # the danger is real
    caplog.clear()
    quiet_oss2_logging()
    b.list_objects_v2(prefix="acme/", max_keys=1)
    assert token not in caplog.text
    assert logging.getLogger("oss2").getEffectiveLevel() == logging.WARNING
