"""oss2 on the tenant's terms: signature V4 (STS too), short timeouts, outcomes classified.

Only this module and the modules that call it touch oss2. The bucket and endpoint always
come from the tenants file, never from a user. oss2 calls block; callers run them in a
worker thread. oss2 logs request headers (Authorization, security token) at DEBUG, so
:func:`quiet_oss2_logging` (from :mod:`qwen_ui.logs`) pins its loggers to WARNING; the
server calls it at start.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import Enum

import oss2
import oss2.exceptions

from qwen_ui.auth.principal import OSSCredentials
from qwen_ui.auth.tenants import OSSConfig
from qwen_ui.logs import quiet_oss2_logging

log = logging.getLogger(__name__)

APP_NAME = "qwen-ui"

__all__ = ["OSSConnector", "Outcome", "classify", "quiet_oss2_logging"]


class Outcome(Enum):
    """What an OSS failure means for the caller."""

    INVALID = "invalid"  # the credentials are wrong, expired or lack rights
    UNAVAILABLE = "unavailable"  # OSS could not be asked (network, 5xx, our clock)
    NOT_FOUND = "not_found"  # no such object
    DENIED = "denied"  # valid credentials, no right on this object


_INVALID_CODES = frozenset(
    {
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "InvalidSecurityToken",
        "SecurityTokenExpired",
        "AccessDenied",
        "InvalidArgument",
    }
)
CREDENTIAL_CODES = _INVALID_CODES - {"AccessDenied", "InvalidArgument"}


def classify(exc: oss2.exceptions.OssError, for_object: bool = False) -> Outcome:
    code = str(exc.code or "")
    if isinstance(exc, oss2.exceptions.RequestError) or exc.status >= 500 or exc.status < 0:
        return Outcome.UNAVAILABLE
    if code == "RequestTimeTooSkewed":
        log.warning("OSS says this server's clock is off; fix the clock (NTP)")
        return Outcome.UNAVAILABLE
    if code == "NoSuchBucket":
        log.warning("OSS bucket in the tenants file does not exist")
        return Outcome.INVALID
    if for_object and code == "NoSuchKey":
        return Outcome.NOT_FOUND
    if for_object and code == "AccessDenied":
        return Outcome.DENIED
    if code in _INVALID_CODES or exc.status in (401, 403):
        return Outcome.INVALID
    return Outcome.NOT_FOUND if exc.status == 404 else Outcome.INVALID


@dataclass
class OSSConnector:
    """Makes ``oss2.Bucket`` objects sharing one connection pool."""

    timeout_s: float
    _session: oss2.Session = field(default_factory=oss2.Session, repr=False)

    def bucket(self, config: OSSConfig, credentials: OSSCredentials) -> oss2.Bucket:
        if credentials.sts_token:
            auth = oss2.StsAuth(
                credentials.key_id,
                credentials.secret,
                credentials.sts_token,
                auth_version=oss2.AUTH_VERSION_4,
            )
        else:
            auth = oss2.AuthV4(credentials.key_id, credentials.secret)
        return oss2.Bucket(
            auth,
            config.endpoint,
            config.bucket,
            session=self._session,
            connect_timeout=self.timeout_s,
            app_name=APP_NAME,
            region=config.region,
        )
