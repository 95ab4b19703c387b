"""Local tenants: users with scrypt password hashes in the tenants file."""

from __future__ import annotations

import re
from dataclasses import dataclass

import anyio.to_thread

from qwen_ui.auth.errors import InvalidCredentials
from qwen_ui.auth.passwords import verify_password
from qwen_ui.auth.principal import PasswordCredentials, Principal
from qwen_ui.auth.tenants import USER_NAME, Tenant

MAX_PASSWORD_CHARS = 1024


@dataclass(frozen=True)
class LocalVerifier:
    async def verify(self, tenant: Tenant, credentials: PasswordCredentials) -> Principal:
        user, password = credentials.user, credentials.password
        valid_name = re.match(USER_NAME, user) is not None
        if not password or len(password) > MAX_PASSWORD_CHARS:
            raise InvalidCredentials()
        stored = tenant.users.get(user) if valid_name and tenant.kind == "local" else None
        ok = await anyio.to_thread.run_sync(verify_password, password, stored)
        if not ok:
            raise InvalidCredentials()
        return Principal(tenant=tenant.id, user=user, method="password")
