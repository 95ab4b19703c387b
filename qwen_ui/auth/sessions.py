"""Login sessions in the state store (memory or Redis).

The cookie carries an opaque 256-bit id; the store keys the record by the SHA-256 of that
id, so a leaked store dump cannot be replayed as cookies. An OSS session keeps the key pair
(and STS token) encrypted with the server key, to fetch objects with the user's own rights.
A session ends after ``session_idle_s`` without use, ``session_lifetime_s`` after login,
at a known STS expiry, or at logout (deleted server-side). Expiry is decided on the
injected :class:`Clock`; the store's TTL only collects garbage.

A session also records :func:`credential_mark` of what it was opened with (a keyed hash
of the user's stored password hash, or of the OSS tenant's settings; never the value
itself): the auth service ends it when the tenants file no longer gives the same mark.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import secrets
from dataclasses import asdict, dataclass, replace
from typing import Any

from qwen_ui.auth.clock import Clock
from qwen_ui.auth.keys import ServerKeys
from qwen_ui.auth.principal import OSSCredentials, Principal
from qwen_ui.auth.tenants import Tenant
from qwen_ui.state import Namespaced

log = logging.getLogger(__name__)

SESSION_ID_RE = re.compile(r"^[A-Za-z0-9_-]{43}$")
TOUCH_EVERY_S = 15.0


@dataclass(frozen=True)
class StoredOSS:
    key_id: str
    secret: str  # Fernet token
    sts_token: str | None  # Fernet token


@dataclass(frozen=True)
class Session:
    tenant: str
    user: str
    method: str
    created: float
    last_seen: float
    expires: float
    verified: float
    oss: StoredOSS | None = None
    credential: str = ""  # credential_mark at login; "" (older records) matches nothing

    @property
    def principal(self) -> Principal:
        return Principal(tenant=self.tenant, user=self.user, method=self.method)  # type: ignore[arg-type]

    @property
    def is_sts(self) -> bool:
        return self.oss is not None and self.oss.sts_token is not None

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> Session | None:
        try:
            data: dict[str, Any] = json.loads(raw)
            oss = data.pop("oss", None)
            return cls(**data, oss=StoredOSS(**oss) if oss else None)
        except (ValueError, TypeError):
            return None


def session_key(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def credential_mark(keys: ServerKeys, tenant: Tenant, principal: Principal) -> str | None:
    """What a session of ``principal`` rests on, as ``tenant`` stands now, under an HMAC:
    a local user's stored password hash, an OSS tenant's OSS settings. None when the
    tenant holds no such credential (a removed user, a tenant of another kind)."""
    if principal.method == "password" and tenant.kind == "local":
        stored = tenant.users.get(principal.user)
        if stored is None:
            return None
        return keys.mac("session-credential", tenant.id, "password", principal.user, stored)
    if principal.method == "oss" and tenant.oss is not None:
        return keys.mac("session-credential", tenant.id, "oss", tenant.oss.model_dump_json())
    return None


@dataclass
class SessionStore:
    store: Namespaced
    keys: ServerKeys
    clock: Clock
    idle_s: float
    lifetime_s: float

    async def create(
        self,
        principal: Principal,
        credentials: OSSCredentials | None = None,
        not_after: float | None = None,
        *,
        credential: str = "",
        verified: float | None = None,
    ) -> tuple[str, Session]:
        """A new session and its id (for the cookie; never stored or logged).
        ``credential``: its :func:`credential_mark`; ``verified``: when the credential was
        last confirmed (an OSS check answered from the cache: that check's time)."""
        now = self.clock()
        expires = now + self.lifetime_s
        if not_after is not None:
            expires = min(expires, not_after)
        session = Session(
            tenant=principal.tenant,
            user=principal.user,
            method=principal.method,
            created=now,
            last_seen=now,
            expires=expires,
            verified=now if verified is None else min(verified, now),
            oss=self._seal(credentials),
            credential=credential,
        )
        session_id = secrets.token_urlsafe(32)
        await self._write(session_id, session)
        log.debug(
            "session created for %s (%s), ends in %.0f s",
            principal.label,
            principal.method,
            expires - now,
        )
        return session_id, session

    def _seal(self, credentials: OSSCredentials | None) -> StoredOSS | None:
        if credentials is None:
            return None
        token = self.keys.encrypt(credentials.sts_token) if credentials.sts_token else None
        return StoredOSS(credentials.key_id, self.keys.encrypt(credentials.secret), token)

    def credentials(self, session: Session) -> OSSCredentials | None:
        """The session's OSS key pair, decrypted; None when there is none or no key opens it."""
        if session.oss is None:
            return None
        secret = self.keys.decrypt(session.oss.secret)
        token = self.keys.decrypt(session.oss.sts_token) if session.oss.sts_token else None
        if secret is None or (session.oss.sts_token and token is None):
            return None
        return OSSCredentials(key_id=session.oss.key_id, secret=secret, sts_token=token)

    async def _write(self, session_id: str, session: Session) -> None:
        now = self.clock()
        ttl = max(1.0, min(session.last_seen + self.idle_s, session.expires) - now)
        await self.store.set(session_key(session_id), session.to_bytes(), ttl=ttl)

    def is_live(self, session: Session) -> bool:
        now = self.clock()
        return now < session.expires and now - session.last_seen < self.idle_s

    async def load(self, session_id: str | None) -> Session | None:
        """The live session for this id (its idle clock restarted), else None."""
        if not session_id or not SESSION_ID_RE.match(session_id):
            return None
        raw = await self.store.get(session_key(session_id))
        session = Session.from_bytes(raw) if raw is not None else None
        if session is None:
            return None
        if not self.is_live(session):
            log.debug("session of %s expired", session.principal.label)
            await self.delete(session_id)
            return None
        if self.clock() - session.last_seen >= TOUCH_EVERY_S:
            session = replace(session, last_seen=self.clock())
            await self._write(session_id, session)
        return session

    async def mark_verified(self, session_id: str, session: Session) -> Session:
        session = replace(session, verified=self.clock())
        await self._write(session_id, session)
        log.debug("session of %s re-verified with OSS", session.principal.label)
        return session

    async def delete(self, session_id: str) -> bool:
        if not SESSION_ID_RE.match(session_id):
            return False
        deleted = await self.store.delete(session_key(session_id))
        log.debug("session deleted (%s)", "it existed" if deleted else "none stored")
        return deleted
