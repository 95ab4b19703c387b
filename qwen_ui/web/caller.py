"""Who is calling, from the request's headers alone (nothing of the body is read).

``Authorization: Bearer <API token>`` names an API token's principal (a wrong token is a
401 ``invalid_token``, not "anonymous"); otherwise the session cookie names a session.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.types import Scope

from qwen_ui.auth import csrf
from qwen_ui.auth.errors import InvalidToken
from qwen_ui.auth.principal import Principal
from qwen_ui.web.auth import SESSION_COOKIE, bearer_token, read_cookie

if TYPE_CHECKING:
    from qwen_ui.auth.service import AuthService


@dataclass(frozen=True)
class Caller:
    principal: Principal
    session_id: str | None  # None: an API bearer token (no ambient credential)

    @property
    def by_cookie(self) -> bool:
        return self.session_id is not None


CallerOf = Callable[[Scope], Awaitable[Caller | None]]
CsrfCheck = Callable[[Caller, str], bool]


def caller_from_headers(auth: Callable[[], AuthService]) -> CallerOf:
    """The guard's resolver over ``auth()`` (the service is built in lifespan)."""

    async def caller_of(scope: Scope) -> Caller | None:
        request = Request(scope)
        token = bearer_token(request)
        if token is not None:
            principal = auth().principal_for_token(token)
            if principal is None:
                raise InvalidToken()
            return Caller(principal, None)
        session_id = read_cookie(request, SESSION_COOKIE)
        session = await auth().resolve(session_id)
        if session is None or session_id is None:
            return None
        return Caller(session.principal, session_id)

    return caller_of


def csrf_header_check(auth: Callable[[], AuthService]) -> CsrfCheck:
    """``X-CSRF-Token`` as /api/v1/me hands it out (``logout_csrf``, bound to the session)."""

    def check(caller: Caller, submitted: str) -> bool:
        if caller.session_id is None or not submitted:
            return False
        expected = csrf.token_for(auth().keys, caller.session_id)
        return hmac.compare_digest(expected, submitted)

    return check
