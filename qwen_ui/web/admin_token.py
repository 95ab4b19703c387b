"""The admin routes' one credential check: ``Authorization: Bearer <QWEN_UI_ADMIN_TOKEN>``.

Compared in constant time and never logged; without the setting every call is refused.
The request guard (:mod:`qwen_ui.web.guard`) runs it from the headers before a byte of an
admin request's body is read; the routes' dependency (:mod:`qwen_ui.web.admin`) runs the
same function.
"""

from __future__ import annotations

import hmac

from pydantic import SecretStr
from starlette.datastructures import Headers

from qwen_ui.models.errors import AdminUnauthorized

ADMIN_PATHS = frozenset({"/admin/models", "/admin/models/activate", "/admin/models/reload"})


def admin_token_matches(authorization: str, token: SecretStr | None) -> bool:
    """Whether an ``Authorization`` header value is ``Bearer <token>``; False when unset."""
    scheme, _, value = authorization.partition(" ")
    expected = token.get_secret_value().encode() if token is not None else b""
    matches = hmac.compare_digest(value.strip().encode(), expected)
    return token is not None and scheme.lower() == "bearer" and matches


def check_admin_token(headers: Headers, token: SecretStr | None) -> None:
    """Raise :class:`AdminUnauthorized` (401) unless the headers carry the admin token."""
    if not admin_token_matches(headers.get("authorization", ""), token):
        raise AdminUnauthorized()
