"""The ``oss://KEY`` images of a batch, read by the batch itself with the caller's own RAM
keys, from the tenant's bucket.

The keys come from the environment under the names oss2 and ossutil read
(``OSS_ACCESS_KEY_ID``, ``OSS_ACCESS_KEY_SECRET``, and ``OSS_SESSION_TOKEN`` for an STS
key); they never reach a command line, a log line or the server. The bucket, endpoint,
region and prefix are the tenant's: from the tenants file for a local run (``--tenant``),
from ``GET /api/v1/me`` for a run against a server, whose API takes uploaded images only.
``KEY`` is a whole object key, as the page's OSS panel and ``/v1/chat/completions`` take
it; it is checked to be inside the tenant's prefix before any request (RAM enforces the
same boundary), and objects larger than ``max_image_bytes`` are refused unread.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from pydantic import ValidationError

from qwen_ui.auth.errors import (
    ObjectAccessDenied,
    ObjectKeyRejected,
    ObjectNotFound,
    ObjectTooLarge,
    OSSUnavailable,
    SessionExpired,
)
from qwen_ui.auth.oss_check import check_tenant
from qwen_ui.auth.oss_client import OSSConnector
from qwen_ui.auth.oss_objects import TenantObjects
from qwen_ui.auth.principal import OSSCredentials
from qwen_ui.auth.tenants import OSSConfig, endpoint_allowed
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
from qwen_ui.batch.rows import OSS_SCHEME, Row
from qwen_ui.errors import QwenUIError
from qwen_ui.logs import quiet_oss2_logging

# the environment variables of the key id, its secret and an STS key's security token
CREDENTIAL_ENV = ("OSS_ACCESS_KEY_ID", "OSS_ACCESS_KEY_SECRET", "OSS_SESSION_TOKEN")

# what the tenant-facing OSS errors become in a row: the image's number and key added
_ROW_ERRORS: dict[type[QwenUIError], type[QwenUIError]] = {
    ObjectNotFound: OssObjectMissing,
    ObjectAccessDenied: OssObjectDenied,
    OSSUnavailable: OssUnreachable,
    SessionExpired: OssKeysExpired,
}


def needs_oss(rows: list[Row], done: set[str]) -> bool:
    """Whether a row still to run names an ``oss://`` image."""
    return any(
        image.startswith(OSS_SCHEME)
        for row in rows
        if row.key not in done and row.problem is None
        for image in row.images
    )


def credentials_from_env(environ: Mapping[str, str]) -> OSSCredentials | None:
    """The RAM keys of the environment, or None when the id or the secret is unset."""
    key_id, secret, sts_token = (environ.get(name, "").strip() for name in CREDENTIAL_ENV)
    if not key_id or not secret:
        return None
    return OSSCredentials(key_id, secret, sts_token or None)


def location_from_me(me: Mapping[str, Any], allow_insecure: bool) -> OSSConfig:
    """The tenant's OSS location as ``/api/v1/me`` reports it (a local run's comes from
    the tenants file, whose loading checks the endpoint the same way)."""
    found = me.get("oss")
    if not isinstance(found, dict):
        problem = f"tenant {me.get('tenant', '?')} of the server has no OSS storage"
        raise OssTenantMissing(problem=problem)
    try:
        config = OSSConfig.model_validate(found)
    except ValidationError as exc:
        problem = "the server described the tenant's OSS storage in a form this batch cannot use"
        raise OssTenantMissing(problem=problem) from exc
    if not endpoint_allowed(config, allow_insecure):  # the keys go only to https://
        raise OssTenantMissing(problem=f"the OSS endpoint {config.endpoint} is not https://")
    return config


@dataclass(frozen=True)
class OssImages:
    """One tenant's bucket and prefix, read with the batch's keys."""

    objects: TenantObjects

    @classmethod
    def open(
        cls, config: OSSConfig, credentials: OSSCredentials, timeout_s: float, max_bytes: int
    ) -> OssImages:
        quiet_oss2_logging()  # oss2 logs request headers (the STS token) at DEBUG
        return cls(TenantObjects(OSSConnector(timeout_s), config, credentials, max_bytes))

    async def check(self) -> None:
        """Raises :class:`OssKeysRefused` unless the keys can list the prefix (a login's
        check, with the cause and advice ``qwen-ui tenants check`` gives)."""
        objects = self.objects
        result = await anyio.to_thread.run_sync(
            check_tenant, objects.connector, objects.config, objects.credentials
        )
        if not result.ok:
            config = objects.config
            raise OssKeysRefused(
                bucket=config.bucket, prefix=config.prefix, reason=result.code, advice=result.advice
            )

    async def read(self, index: int, ref: str) -> bytes:
        """The bytes of image ``index`` (1-based), ``oss://KEY``; typed row errors."""
        key = ref.removeprefix(OSS_SCHEME)
        try:
            return await self.objects.fetch(key)
        except ObjectKeyRejected as exc:
            raise OssKeyRejected(index=index, key=ref, reason=exc.params["reason"]) from None
        except ObjectTooLarge:
            raise OssObjectTooLarge(index=index, key=ref, limit=self.objects.max_bytes) from None
        except tuple(_ROW_ERRORS) as exc:
            raise _ROW_ERRORS[type(exc)](index=index, key=ref) from None
