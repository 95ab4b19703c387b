"""OSS tenants: a key pair is valid when it can list the tenant's prefix (signature V4).

``list_objects_v2(prefix, max_keys=1)`` needs only ``oss:ListObjects`` on that prefix.
Wrong key, wrong secret, bad or expired STS token, no rights, or a key id the tenant does
not allow: all :class:`InvalidCredentials`. OSS unreachable: :class:`OSSUnavailable`,
which is not a failed login. A success may be remembered for at most five minutes, under
an HMAC (server key) of the credentials, never the credentials themselves.
"""

from __future__ import annotations

import fnmatch
import logging
import re
from dataclasses import dataclass
from functools import partial

import anyio.to_thread
import oss2.exceptions

from qwen_ui.auth.errors import InvalidCredentials, OSSUnavailable
from qwen_ui.auth.keys import ServerKeys
from qwen_ui.auth.oss_client import OSSConnector, Outcome, classify
from qwen_ui.auth.principal import OSSCredentials, Principal
from qwen_ui.auth.tenants import KEY_ID, Tenant
from qwen_ui.state import Namespaced

log = logging.getLogger(__name__)

MAX_CACHE_S = 300.0
MAX_SECRET_CHARS = 256
MAX_STS_TOKEN_CHARS = 8192


def key_id_allowed(allowed: list[str], key_id: str) -> bool:
    """Empty list: any key. Entries may end in ``*`` (``STS.*`` for temporary keys)."""
    return not allowed or any(fnmatch.fnmatchcase(key_id, pattern) for pattern in allowed)


def well_formed(credentials: OSSCredentials) -> bool:
    return (
        re.match(KEY_ID, credentials.key_id) is not None
        and 0 < len(credentials.secret) <= MAX_SECRET_CHARS
        and len(credentials.sts_token or "") <= MAX_STS_TOKEN_CHARS
    )


@dataclass(frozen=True)
class OSSVerifier:
    connector: OSSConnector
    keys: ServerKeys
    cache: Namespaced
    cache_s: float = MAX_CACHE_S

    async def verify(
        self, tenant: Tenant, credentials: OSSCredentials, use_cache: bool = True
    ) -> Principal:
        if tenant.oss is None or not well_formed(credentials):
            raise InvalidCredentials()
        if not key_id_allowed(tenant.oss.allowed_key_ids, credentials.key_id):
            raise InvalidCredentials()
        principal = Principal(tenant=tenant.id, user=credentials.key_id, method="oss")
        cache_key = self._cache_key(tenant, credentials)
        if use_cache and await self.cache.get(cache_key) is not None:
            return principal
        await self._ask_oss(tenant, credentials)
        ttl = min(self.cache_s, MAX_CACHE_S)
        if ttl > 0:
            await self.cache.set(cache_key, b"1", ttl=ttl)
        return principal

    def _cache_key(self, tenant: Tenant, credentials: OSSCredentials) -> str:
        return self.keys.mac(
            "oss-verified",
            tenant.id,
            credentials.key_id,
            credentials.secret,
            credentials.sts_token or "",
        )

    async def _ask_oss(self, tenant: Tenant, credentials: OSSCredentials) -> None:
        assert tenant.oss is not None
        bucket = self.connector.bucket(tenant.oss, credentials)
        call = partial(bucket.list_objects_v2, prefix=tenant.oss.prefix, max_keys=1)
        try:
            await anyio.to_thread.run_sync(call)
        except oss2.exceptions.OssError as exc:
            outcome = classify(exc)
            log.info("OSS refused a login for tenant %s: %s", tenant.id, exc.code or exc.status)
            if outcome is Outcome.UNAVAILABLE:
                raise OSSUnavailable() from None
            raise InvalidCredentials() from None
