"""The tenants file (TOML under ``QWEN_UI_HOME``): its model, loading, saving, reloading.

::

    [tenants.acme]                       # tenant id: [a-z0-9][a-z0-9_-]*
    name = "Acme Ltd"
    kind = "oss"                         # or "local"
    [tenants.acme.oss]
    region = "cn-hangzhou"
    endpoint = "https://oss-cn-hangzhou.aliyuncs.com"   # https:// only (see below)
    bucket = "acme-images"
    prefix = "vqa/"                      # the keys' rights are checked on this prefix
    allowed_key_ids = []                 # empty: any key that can list the prefix
    [tenants.acme.limits]
    concurrent_requests = 2
    questions_per_day = 1000             # 0: unlimited
    [tenants.demo.users]                 # local tenants: user = scrypt hash
    alice = "scrypt$14$8$1$..."
    [[tenants.acme.tokens]]              # API tokens, stored hashed
    id = "a1b2c3d4"
    hash = "sha256:..."
    created = "2026-11-30T08:00:00+00:00"

Plain ``http://`` endpoints are refused unless the server runs with
``allow_insecure_oss_endpoints`` *and* the endpoint is a loopback address (tests only).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import tomllib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import tomlkit
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from qwen_ui.auth.errors import TenantsFileError

log = logging.getLogger(__name__)

TENANT_ID = r"^[a-z0-9][a-z0-9_-]{0,62}$"
USER_NAME = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$"
KEY_ID = r"^[A-Za-z0-9.]{1,128}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OSSConfig(_Strict):
    region: str = Field(pattern=r"^[a-z0-9-]{1,64}$")
    endpoint: str = Field(pattern=r"^https?://[^/?#\s]+/?$")
    bucket: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
    prefix: str = Field(pattern=r"^([^/\\\s][^\\]*/)?$", max_length=512)
    allowed_key_ids: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _plain_prefix(self) -> OSSConfig:
        if any(part in {".", ".."} for part in self.prefix.split("/")) or "%" in self.prefix:
            raise ValueError("the prefix may not contain '.', '..' segments or '%'")
        return self

    @property
    def endpoint_host(self) -> str:
        return urlsplit(self.endpoint).hostname or ""

    @property
    def is_https(self) -> bool:
        return self.endpoint.startswith("https://")


class Limits(_Strict):
    concurrent_requests: int = Field(2, ge=1, le=1000)
    questions_per_day: int = Field(1000, ge=0, le=10_000_000)


class TokenRecord(_Strict):
    id: str = Field(pattern=r"^[0-9a-f]{8}$")
    hash: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    created: datetime
    label: str = ""


class Tenant(_Strict):
    id: str = Field(pattern=TENANT_ID)
    name: str = ""
    kind: Literal["oss", "local"]
    oss: OSSConfig | None = None
    users: dict[str, str] = Field(default_factory=dict)
    limits: Limits = Field(default_factory=Limits)  # type: ignore[arg-type]
    tokens: list[TokenRecord] = Field(default_factory=list)

    @model_validator(mode="after")
    def _kind_matches(self) -> Tenant:
        if self.kind == "oss" and self.oss is None:
            raise ValueError("an oss tenant needs an [oss] table")
        if self.kind == "local" and self.oss is not None:
            raise ValueError("a local tenant has no [oss] table")
        if self.kind == "oss" and self.users:
            raise ValueError("an oss tenant has no local users")
        return self

    @property
    def display_name(self) -> str:
        return self.name or self.id


class TenantsFile(_Strict):
    tenants: dict[str, Tenant] = Field(default_factory=dict)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def endpoint_allowed(oss: OSSConfig, allow_insecure: bool) -> bool:
    """An https:// endpoint, or (``allow_insecure``, tests only) plain http on loopback."""
    return oss.is_https or (allow_insecure and _is_loopback(oss.endpoint_host))


def check_endpoints(tenants: TenantsFile, allow_insecure: bool) -> None:
    for tenant in tenants.tenants.values():
        if tenant.oss is not None and not endpoint_allowed(tenant.oss, allow_insecure):
            raise ValueError(f"tenant {tenant.id}: the OSS endpoint must start with https://")


def parse(data: dict[str, Any]) -> TenantsFile:
    tables = data.get("tenants", {})
    if not isinstance(tables, dict):
        raise ValueError("[tenants] must be a table")
    tenants = {tid: {**table, "id": tid} for tid, table in tables.items()}
    return TenantsFile.model_validate({**data, "tenants": tenants})


def load(path: Path, allow_insecure: bool = False) -> TenantsFile:
    """The tenants in ``path`` (empty when the file does not exist)."""
    if not path.exists():
        return TenantsFile()
    try:
        tenants = parse(tomllib.loads(path.read_text(encoding="utf-8")))
        check_endpoints(tenants, allow_insecure)
    except (tomllib.TOMLDecodeError, ValidationError, ValueError) as exc:
        raise TenantsFileError(path=str(path), problem=_short(exc)) from exc
    return tenants


def _short(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return f"{where}: {first['msg']}" if where else str(first["msg"])
    return str(exc)


def dumps(tenants: TenantsFile) -> str:
    data = tenants.model_dump(mode="json", exclude_none=True)
    for table in data["tenants"].values():
        del table["id"]
        if not table["users"]:
            del table["users"]
        if not table["tokens"]:
            del table["tokens"]
    return tomlkit.dumps(data)


def save(path: Path, tenants: TenantsFile) -> None:
    """Write atomically, readable by the owner only (the file holds password hashes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(dumps(tenants))
    os.replace(tmp, path)


def with_tenant(tenants: TenantsFile, tenant: Tenant) -> TenantsFile:
    return TenantsFile(tenants={**tenants.tenants, tenant.id: tenant})


@dataclass
class TenantRegistry:
    """The tenants file as the server sees it, reloaded when the file changes on disk,
    so ``qwen-ui tenants ...`` (new users, revoked tokens) takes effect without a restart."""

    path: Path
    allow_insecure: bool = False
    _tenants: TenantsFile = field(default_factory=TenantsFile)
    _stamp: tuple[int, int, int] | None = None
    _token_index: dict[str, tuple[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._tenants = load(self.path, self.allow_insecure)
        self._stamp = self._stat()
        self._index()

    def _stat(self) -> tuple[int, int, int] | None:
        """The file's inode too: :func:`save` replaces the file, and a new password hash
        keeps the size and may keep the (coarse) mtime."""
        try:
            info = self.path.stat()
        except FileNotFoundError:
            return None
        return info.st_ino, info.st_mtime_ns, info.st_size

    def _index(self) -> None:
        self._token_index = {
            record.hash: (tenant.id, record.id)
            for tenant in self._tenants.tenants.values()
            for record in tenant.tokens
        }

    def refresh(self) -> None:
        stamp = self._stat()
        if stamp == self._stamp:
            return
        try:
            self._tenants = load(self.path, self.allow_insecure)
        except TenantsFileError as exc:
            log.error("keeping the previous tenants: %s", exc.message("en"))
            return
        self._stamp = stamp
        self._index()
        log.info("tenants file reloaded: %d tenant(s)", len(self._tenants.tenants))

    def get(self, tenant_id: str) -> Tenant | None:
        self.refresh()
        return self._tenants.tenants.get(tenant_id)

    def all(self) -> list[Tenant]:
        self.refresh()
        return list(self._tenants.tenants.values())

    def token_owner(self, token_hash: str) -> tuple[str, str] | None:
        """(tenant id, token id) for a stored token hash."""
        self.refresh()
        return self._token_index.get(token_hash)
