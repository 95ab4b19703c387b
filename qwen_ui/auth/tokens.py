"""API tokens: ``qwu_<id>_<secret>``, shown once, stored as a SHA-256 hash, revocable.

The id (8 hex digits) is public: ``qwen-ui tenants list`` shows it and ``revoke-token``
takes it. The secret part carries 256 bits, so a plain SHA-256 is a sound stored form.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import UTC, datetime

from qwen_ui.auth.tenants import Tenant, TokenRecord

TOKEN_RE = re.compile(r"^qwu_([0-9a-f]{8})_([A-Za-z0-9_-]{43})$")


def hash_token(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def looks_like_token(token: str) -> bool:
    return TOKEN_RE.match(token) is not None


def new_token(label: str = "") -> tuple[str, TokenRecord]:
    """A fresh token (show it once) and the record to store."""
    token_id = secrets.token_hex(4)
    token = f"qwu_{token_id}_{secrets.token_urlsafe(32)}"
    record = TokenRecord(
        id=token_id, hash=hash_token(token), created=datetime.now(UTC), label=label
    )
    return token, record


def add_token(tenant: Tenant, record: TokenRecord) -> Tenant:
    return tenant.model_copy(update={"tokens": [*tenant.tokens, record]})


def revoke_token(tenant: Tenant, token_id: str) -> Tenant | None:
    """The tenant without that token, or None when it has no such token."""
    kept = [record for record in tenant.tokens if record.id != token_id]
    if len(kept) == len(tenant.tokens):
        return None
    return tenant.model_copy(update={"tokens": kept})
