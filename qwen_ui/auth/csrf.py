"""CSRF tokens for the login and logout forms.

Before login, the page sets a random nonce cookie and the form carries
``HMAC(server key, nonce)``; after login the binding is the session id. A post whose
field does not match its own cookie is refused (the routes also check the post's
``Origin``: :mod:`qwen_ui.web.origin`).
"""

from __future__ import annotations

import hmac
import secrets

from qwen_ui.auth.errors import CsrfFailed
from qwen_ui.auth.keys import ServerKeys

NONCE_BYTES = 32


def new_nonce() -> str:
    return secrets.token_urlsafe(NONCE_BYTES)


def token_for(keys: ServerKeys, binding: str) -> str:
    return keys.mac("csrf", binding)


def check(keys: ServerKeys, binding: str | None, submitted: str | None) -> None:
    if not binding or not submitted:
        raise CsrfFailed()
    if not hmac.compare_digest(token_for(keys, binding), submitted):
        raise CsrfFailed()
