"""The auth service of one app: tenants, verifiers, sessions, throttle, tokens, audit.

Built once in the server's lifespan as part of the app's services. The web layer hands it
what a request carries (form fields, a cookie, a bearer token) and gets back a
:class:`~qwen_ui.auth.principal.Principal` or a typed error.
"""

from __future__ import annotations

import hmac
import logging
import re
import time
from dataclasses import dataclass, field

import anyio
import anyio.to_thread

from qwen_ui.auth.audit import AuditLog
from qwen_ui.auth.clock import Clock
from qwen_ui.auth.errors import InvalidCredentials, LoginThrottled, NoObjectStorage, OSSUnavailable
from qwen_ui.auth.keys import ServerKeys, load_server_keys
from qwen_ui.auth.local import LocalVerifier
from qwen_ui.auth.oss import OSSVerifier
from qwen_ui.auth.oss_client import OSSConnector
from qwen_ui.auth.oss_objects import TenantObjects
from qwen_ui.auth.passwords import verify_password
from qwen_ui.auth.principal import Credentials, OSSCredentials, PasswordCredentials, Principal
from qwen_ui.auth.quotas import TenantQuotas
from qwen_ui.auth.sessions import Session, SessionStore, credential_mark
from qwen_ui.auth.tenants import TENANT_ID, Limits, Tenant, TenantRegistry
from qwen_ui.auth.throttle import LoginThrottle, ThrottlePolicy
from qwen_ui.auth.tokens import hash_token, looks_like_token
from qwen_ui.errors import QwenUIError
from qwen_ui.settings import Settings
from qwen_ui.state import State

log = logging.getLogger(__name__)

_LOGGABLE_KEY_ID = re.compile(r"^(LTAI|STS\.)[A-Za-z0-9]{4,124}$")


@dataclass(frozen=True)
class LoginAttempt:
    tenant: str
    credentials: Credentials
    ip: str
    request_id: str
    not_after: float | None = None  # a known STS expiry (epoch seconds)

    @property
    def who(self) -> str:
        creds = self.credentials
        return creds.user if isinstance(creds, PasswordCredentials) else creds.key_id


@dataclass(frozen=True)
class Verified:
    """A login's proven principal, the :func:`credential_mark` of the tenant it was
    checked against, and when the credential was confirmed."""

    principal: Principal
    credential: str
    confirmed: float


@dataclass
class AuthService:
    settings: Settings
    registry: TenantRegistry
    keys: ServerKeys
    sessions: SessionStore
    throttle: LoginThrottle
    audit: AuditLog
    local: LocalVerifier
    oss: OSSVerifier
    connector: OSSConnector
    quotas: TenantQuotas
    clock: Clock = field(default_factory=Clock)

    @classmethod
    def build(cls, settings: Settings, state: State, clock: Clock | None = None) -> AuthService:
        clock = clock or Clock()
        keys = load_server_keys(settings)
        connector = OSSConnector(timeout_s=settings.oss_timeout_s)
        policy = ThrottlePolicy(
            max_failures=settings.login_max_failures,
            max_failures_per_ip=settings.login_max_failures_per_ip,
            backoff_s=settings.login_backoff_s,
            backoff_max_s=settings.login_backoff_max_s,
            window_s=settings.login_window_s,
        )
        registry = TenantRegistry(settings.tenants_path, settings.allow_insecure_oss_endpoints)
        return cls(
            settings=settings,
            registry=registry,
            keys=keys,
            sessions=SessionStore(
                state.namespace("sessions"),
                keys,
                clock,
                idle_s=settings.session_idle_s,
                lifetime_s=settings.session_lifetime_s,
            ),
            throttle=LoginThrottle(state.namespace("login-throttle"), keys, clock, policy),
            audit=AuditLog(settings.log_path),
            local=LocalVerifier(),
            oss=OSSVerifier(
                connector,
                keys,
                state.namespace("oss-verified"),
                recheck_s=settings.sts_recheck_s,
                cache_s=settings.oss_verify_cache_s,
                clock=clock,
            ),
            connector=connector,
            quotas=TenantQuotas(state.namespace("quota"), registry, clock),
            clock=clock,
        )

    # --- login ------------------------------------------------------------------------

    async def login(self, attempt: LoginAttempt) -> tuple[str, Session]:
        """Verify and open a session; returns (session id for the cookie, session)."""
        started = time.perf_counter()
        outcome = "invalid"
        try:
            verified = await self._throttled_verify(attempt)
            oss = attempt.credentials if isinstance(attempt.credentials, OSSCredentials) else None
            session_id, session = await self.sessions.create(
                verified.principal,
                oss,
                attempt.not_after,
                credential=verified.credential,
                verified=verified.confirmed,
            )
            outcome = "ok"
            return session_id, session
        except LoginThrottled:
            outcome = "throttled"
            raise
        except OSSUnavailable:
            outcome = "oss_unavailable"
            raise
        except InvalidCredentials:
            raise
        except QwenUIError as error:  # e.g. the state store is down
            outcome = error.code
            raise
        finally:
            seconds = time.perf_counter() - started
            log.debug("login attempt for tenant %s: %s", self._loggable_tenant(attempt), outcome)
            self._audit_login(attempt, outcome, seconds)

    async def _throttled_verify(self, attempt: LoginAttempt) -> Verified:
        """The verifier runs only inside a throttle slot reserved before it starts."""
        ident = f"{attempt.tenant}/{attempt.who}"
        reservation = await self.throttle.reserve(attempt.ip, ident)
        try:
            verified = await self._verify(attempt)
        except InvalidCredentials:
            await self.throttle.failed(reservation)
            raise
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.throttle.release(reservation)
            raise
        await self.throttle.succeeded(reservation)
        return verified

    async def _verify(self, attempt: LoginAttempt) -> Verified:
        if attempt.not_after is not None and attempt.not_after <= self.clock():
            raise InvalidCredentials()  # the STS credentials have already expired
        tenant = self.registry.get(attempt.tenant) if re.match(TENANT_ID, attempt.tenant) else None
        creds = attempt.credentials
        if isinstance(creds, PasswordCredentials):
            if tenant is None or tenant.kind != "local":
                await anyio.to_thread.run_sync(verify_password, creds.password[:64], None)
                raise InvalidCredentials()
            principal = await self.local.verify(tenant, creds)
            return self._verified(tenant, principal, self.clock())
        if tenant is None or tenant.kind != "oss":
            raise InvalidCredentials()
        confirmed = await self.oss.verify(tenant, creds, not_after=attempt.not_after)
        return self._verified(tenant, confirmed.principal, confirmed.at)

    def _verified(self, tenant: Tenant, principal: Principal, confirmed: float) -> Verified:
        """The mark comes from the same tenant the credential was checked against."""
        credential = credential_mark(self.keys, tenant, principal)
        if credential is None:
            raise InvalidCredentials()
        return Verified(principal, credential, confirmed)

    def _audit_login(self, attempt: LoginAttempt, outcome: str, seconds: float) -> None:
        creds = attempt.credentials
        method = "password" if isinstance(creds, PasswordCredentials) else "oss"
        self.audit.login(
            tenant=self._loggable_tenant(attempt),
            user=self._loggable_user(attempt, outcome),
            method=method,
            outcome=outcome,
            ip=attempt.ip,
            request_id=attempt.request_id,
            ms=seconds * 1000,
        )

    @staticmethod
    def _loggable_tenant(attempt: LoginAttempt) -> str:
        return attempt.tenant if re.match(TENANT_ID, attempt.tenant) else "(invalid)"

    def _loggable_user(self, attempt: LoginAttempt, outcome: str) -> str:
        """Only names that cannot be a mistyped secret: known users, key-id shapes."""
        creds = attempt.credentials
        if isinstance(creds, OSSCredentials):
            return creds.key_id if _LOGGABLE_KEY_ID.match(creds.key_id) else "(unrecognised)"
        tenant = self.registry.get(attempt.tenant) if outcome != "ok" else None
        known = outcome == "ok" or (tenant is not None and creds.user in tenant.users)
        return creds.user if known else "(unknown)"

    # --- sessions ---------------------------------------------------------------------

    async def resolve(self, session_id: str | None) -> Session | None:
        """The live session for a cookie value. It ends when the tenants file no longer
        holds the credential it was opened with (a new password, a removed user or
        tenant, changed OSS settings); STS sessions re-check their token."""
        session = await self.sessions.load(session_id)
        if session is None or session_id is None:
            return None
        tenant = self.registry.get(session.tenant)
        if tenant is None or not self._same_credential(tenant, session):
            label = session.principal.label
            log.info("session of %s ended: the tenants file no longer holds its credential", label)
            await self.sessions.delete(session_id)
            return None
        if session.is_sts and self.clock() - session.verified >= self.settings.sts_recheck_s:
            return await self._recheck(session_id, session, tenant)
        return session

    def _same_credential(self, tenant: Tenant, session: Session) -> bool:
        current = credential_mark(self.keys, tenant, session.principal)
        return current is not None and hmac.compare_digest(current, session.credential)

    async def _recheck(self, session_id: str, session: Session, tenant: Tenant) -> Session | None:
        credentials = self.sessions.credentials(session)
        try:
            if credentials is None:
                raise InvalidCredentials()
            await self.oss.verify(tenant, credentials, use_cache=False)
        except InvalidCredentials:
            log.debug("STS session of %s refused at its re-check; ended", session.principal.label)
            await self.sessions.delete(session_id)
            return None
        except OSSUnavailable:
            log.debug("STS re-check of %s postponed: OSS unreachable", session.principal.label)
            return session
        return await self.sessions.mark_verified(session_id, session)

    async def logout(self, session_id: str, request_id: str) -> None:
        session = await self.sessions.load(session_id)
        await self.sessions.delete(session_id)
        if session is not None:
            self.audit.logout(session.principal, request_id)

    # --- API tokens and objects -------------------------------------------------------

    def principal_for_token(self, token: str) -> Principal | None:
        if not looks_like_token(token):
            return None
        owner = self.registry.token_owner(hash_token(token))
        if owner is None:
            return None
        tenant_id, token_id = owner
        return Principal(tenant=tenant_id, user=f"token:{token_id}", method="token")

    def tenant_limit(self, tenant: str) -> int:
        """The tenant's concurrent-request limit from the tenants file (admission's)."""
        found = self.registry.get(tenant)
        limits = found.limits if found is not None else Limits()  # type: ignore[call-arg]
        return int(limits.concurrent_requests)

    def objects(self, session: Session) -> TenantObjects:
        """The session's tenant prefix, read with the session's own credentials."""
        tenant = self.registry.get(session.tenant)
        credentials = self.sessions.credentials(session)
        if tenant is None or tenant.oss is None or credentials is None:
            raise NoObjectStorage()
        return TenantObjects(self.connector, tenant.oss, credentials, self.settings.max_image_bytes)
