"""OSS tenants: a key pair is valid when it can list the tenant's prefix (signature V4).

``list_objects_v2(prefix, max_keys=1)`` needs only ``oss:ListObjects`` on that prefix.
Wrong key, wrong secret, bad or expired STS token, no rights, or a key id the tenant does
not allow: all :class:`InvalidCredentials`. OSS unreachable: :class:`OSSUnavailable`,
which is not a failed login.

A success may be remembered for at most five minutes, under an HMAC (server key) of the
whole credential (key id, secret and STS token), never the credentials themselves. STS
credentials are remembered only when their expiry is stated, never past it, and never
past the time OSS confirmed them plus ``recheck_s`` (the STS sessions' re-check interval):
a stated expiry may be later than the real one. A check answered from the cache reports
when OSS confirmed the credential, so a session opened with it re-checks on time. The moment
OSS rejects a key id (for any session or login), every remembered success of that key id
from before the rejection stops counting: the rejection is stored (under an HMAC of the
key id) for as long as an entry can live, and an entry counts only if it was verified
after it. Entries and rejections carry times judged on the injected clock.
"""

from __future__ import annotations

import fnmatch
import logging
import re
from dataclasses import dataclass, field
from functools import partial

import anyio.to_thread
import oss2.exceptions

from qwen_ui.auth.clock import Clock
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
class Confirmed:
    """A key OSS accepted, and when OSS said so (earlier than now for a cached answer)."""

    principal: Principal
    at: float


@dataclass(frozen=True)
class OSSVerifier:
    connector: OSSConnector
    keys: ServerKeys
    cache: Namespaced
    recheck_s: float  # an STS entry counts at most this long after OSS confirmed it
    cache_s: float = MAX_CACHE_S
    clock: Clock = field(default_factory=Clock)

    async def verify(
        self,
        tenant: Tenant,
        credentials: OSSCredentials,
        use_cache: bool = True,
        not_after: float | None = None,
    ) -> Confirmed:
        """Ask OSS (or the cache) whether the key can list the tenant's prefix; for STS
        credentials ``not_after`` is their stated expiry (epoch seconds on the clock)."""
        if tenant.oss is None or not well_formed(credentials):
            raise InvalidCredentials()
        if not key_id_allowed(tenant.oss.allowed_key_ids, credentials.key_id):
            raise InvalidCredentials()
        principal = Principal(tenant=tenant.id, user=credentials.key_id, method="oss")
        cache_key = self._cache_key(tenant, credentials)
        cacheable = credentials.sts_token is None or not_after is not None
        cached = await self._cached(cache_key, credentials) if use_cache and cacheable else None
        if cached is not None:
            log.debug("OSS key check for tenant %s answered from the cache", tenant.id)
            return Confirmed(principal, cached)
        asked_at = self.clock()
        await self._ask_oss(tenant, credentials)
        until = self._cache_until(credentials, asked_at, not_after)
        await self._remember(cache_key, asked_at, until)
        return Confirmed(principal, asked_at)

    def _cache_until(
        self, credentials: OSSCredentials, asked_at: float, not_after: float | None
    ) -> float:
        """Until when a success counts: STS credentials only with a stated expiry, never
        past it, nor past ``recheck_s`` after OSS confirmed them."""
        until = asked_at + min(self.cache_s, MAX_CACHE_S)
        if not credentials.sts_token:
            return until
        if not_after is None:
            return asked_at  # not remembered
        return min(until, not_after, asked_at + self.recheck_s)

    async def _remember(self, cache_key: str, asked_at: float, until: float) -> None:
        ttl = until - self.clock()
        if ttl <= 0:
            return
        value = f"{asked_at!r} {until!r}".encode()
        await self.cache.set(cache_key, value, ttl=ttl)

    async def _cached(self, cache_key: str, credentials: OSSCredentials) -> float | None:
        """When OSS confirmed this credential, if a remembered success still counts."""
        raw = await self.cache.get(cache_key)
        try:
            verified, until = (float(part) for part in (raw or b"").split())
        except ValueError:
            return None
        if until <= self.clock():
            return None
        rejected = await self.cache.get(self._rejected_key(credentials.key_id))
        return verified if rejected is None or verified > float(rejected) else None

    async def forget(self, key_id: str) -> None:
        """OSS rejected this key id: no remembered success from before now counts."""
        ttl = MAX_CACHE_S + 60.0  # outlives every entry that could still be live
        await self.cache.set(self._rejected_key(key_id), repr(self.clock()).encode(), ttl=ttl)

    def _rejected_key(self, key_id: str) -> str:
        return "rejected:" + self.keys.mac("oss-rejected", key_id)

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
            await self.forget(credentials.key_id)
            raise InvalidCredentials() from None
        log.debug("OSS accepted the key for tenant %s", tenant.id)
