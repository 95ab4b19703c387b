"""``tenants check``: can this key list the tenant's prefix, and if not, why.

A login that fails says only "invalid credentials" to the person at the form (it must not
tell an attacker which half was wrong); the operator who holds the key needs the real
cause. :func:`check_tenant` makes the same signed ``ListObjects`` call a login makes and
turns OSS's error code into advice naming that code.
"""

from __future__ import annotations

from dataclasses import dataclass

import oss2.exceptions

from qwen_ui.auth.oss_client import OSSConnector
from qwen_ui.auth.principal import OSSCredentials
from qwen_ui.auth.tenants import OSSConfig

UNREACHABLE = "Unreachable"

ADVICE = {
    "SignatureDoesNotMatch": "the signature does not match: check the region ({region}) "
    "and the AccessKey secret",
    "InvalidAccessKeyId": "OSS does not know this AccessKey id (a typo, or the key was "
    "deleted or disabled)",
    "AccessDenied": "the key is valid but lacks oss:ListObjects on prefix {prefix!r} of "
    "bucket {bucket}",
    "NoSuchBucket": "bucket {bucket} does not exist at {endpoint} (check the bucket name "
    "and the endpoint's region)",
    "RequestTimeTooSkewed": "this machine's clock differs from OSS's by more than 15 "
    "minutes: fix the clock (NTP)",
    "InvalidSecurityToken": "the STS token is invalid or belongs to another AccessKey id",
    "SecurityTokenExpired": "the STS token has expired: get a new one",
    "InvalidArgument": "OSS refused the request's form (check the region ({region}) and "
    "the endpoint)",
    UNREACHABLE: "could not reach {endpoint} (network, DNS, firewall, or a wrong endpoint)",
}


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    code: str  # OSS's error code, "Unreachable", or "" on success
    status: int  # HTTP status (0 on success, -2 when unreachable)
    request_id: str
    advice: str


def advice_for(code: str, status: int, config: OSSConfig) -> str:
    template = ADVICE.get(code)
    if template is None:
        return f"OSS answered HTTP {status} with code {code or '(none)'}"
    return template.format(
        region=config.region, prefix=config.prefix, bucket=config.bucket, endpoint=config.endpoint
    )


def check_tenant(
    connector: OSSConnector, config: OSSConfig, credentials: OSSCredentials
) -> CheckResult:
    """List one object under the tenant's prefix with ``credentials`` (blocking)."""
    bucket = connector.bucket(config, credentials)
    try:
        bucket.list_objects_v2(prefix=config.prefix, max_keys=1)
    except oss2.exceptions.RequestError:
        return CheckResult(False, UNREACHABLE, -2, "", advice_for(UNREACHABLE, -2, config))
    except oss2.exceptions.OssError as exc:
        code = str(exc.code or "")
        request_id = str(exc.request_id or "")
        return CheckResult(
            False, code, exc.status, request_id, advice_for(code, exc.status, config)
        )
    return CheckResult(True, "", 0, "", "the key can list the prefix")
