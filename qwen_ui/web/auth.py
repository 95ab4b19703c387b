"""Where HTTP meets auth: cookies, the request -> Principal dependencies, Gradio's hook.

- :func:`require_principal` (FastAPI dependency): the session cookie or
  ``Authorization: Bearer <API token>`` -> :class:`Principal`, else 401.
- :func:`require_session`: the session itself (OSS routes need its credentials).
- :func:`gradio_auth_dependency`: Gradio's ``auth_dependency`` (cookie -> "tenant/user").
- :func:`principal_from_gradio`: the Principal inside a Gradio event handler.
- Browsers without a session are sent to ``/login`` by the request guard (``guard.py``).

The session cookie is ``HttpOnly; SameSite=Lax; Path=/``, and over HTTPS (the request's
scheme, which ProxyHeadersMiddleware takes from X-Forwarded-Proto of trusted proxies) it
is ``Secure`` and named with the ``__Host-`` prefix.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from starlette.responses import Response

from qwen_ui.auth.errors import InvalidToken
from qwen_ui.auth.principal import Principal
from qwen_ui.auth.sessions import Session
from qwen_ui.errors import QwenUIError, Unauthorized
from qwen_ui.services import ServicesDep, services_of

SESSION_COOKIE = "qwen_session"
CSRF_COOKIE = "qwen_csrf"
SECURE_PREFIX = "__Host-"


def is_https(request: Request) -> bool:
    return request.url.scheme == "https"


def cookie_name(base: str, https: bool) -> str:
    return SECURE_PREFIX + base if https else base


def read_cookie(request: Request, base: str) -> str | None:
    return request.cookies.get(cookie_name(base, is_https(request)))


def set_cookie(
    response: Response, request: Request, base: str, value: str, max_age: int | None
) -> None:
    https = is_https(request)
    response.set_cookie(
        cookie_name(base, https),
        value,
        max_age=max_age,
        path="/",
        secure=https,
        httponly=True,
        samesite="lax",
    )


def clear_cookie(response: Response, request: Request, base: str) -> None:
    https = is_https(request)
    response.delete_cookie(
        cookie_name(base, https), path="/", secure=https, httponly=True, samesite="lax"
    )


def bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


async def require_session(request: Request, services: ServicesDep) -> tuple[str, Session]:
    """(session id, session) of the request's cookie, else 401."""
    session_id = read_cookie(request, SESSION_COOKIE)
    session = await services.auth.resolve(session_id)
    if session is None or session_id is None:
        raise Unauthorized()
    return session_id, session


async def require_principal(request: Request, services: ServicesDep) -> Principal:
    """FastAPI dependency: who is calling (session cookie or API bearer token), else 401."""
    token = bearer_token(request)
    if token is not None:
        principal = services.auth.principal_for_token(token)
        if principal is None:
            raise InvalidToken()
        return principal
    _session_id, session = await require_session(request, services)
    return session.principal


SessionDep = Annotated[tuple[str, Session], Depends(require_session)]
PrincipalDep = Annotated[Principal, Depends(require_principal)]


def gradio_auth_dependency(app: FastAPI) -> Callable[[Request], Awaitable[str | None]]:
    """Gradio's ``auth_dependency``: "tenant/user" for a live session cookie, else None.
    (Gradio calls it with requests of its own sub-app, so the app is captured here.)"""

    async def user_of(request: Request) -> str | None:
        try:
            auth = services_of(app).auth
            session = await auth.resolve(read_cookie(request, SESSION_COOKIE))
        except QwenUIError as error:  # Gradio's own app renders HTTPException, not ours
            raise HTTPException(error.status, detail=error.message("en")) from None
        return None if session is None else session.principal.label

    return user_of


def principal_from_gradio(request: Any) -> Principal:
    """The Principal of a Gradio event (``request: gr.Request``): set by the auth hook."""
    label = getattr(request, "username", None)
    if not label or "/" not in label:
        raise Unauthorized()
    return Principal.from_label(label)


async def session_from_gradio(app: FastAPI, request: Any) -> tuple[str, Session]:
    """The session behind a Gradio event, for work that needs its OSS credentials."""
    cookies = getattr(request, "cookies", None) or {}
    https = getattr(getattr(request, "url", None), "scheme", "http") == "https"
    session_id = cookies.get(cookie_name(SESSION_COOKIE, https))
    session = await services_of(app).auth.resolve(session_id)
    if session is None or session_id is None:
        raise Unauthorized()
    return session_id, session


def safe_next(value: str | None, default: str) -> str:
    """A local path to return to after login (never another site)."""
    if (
        not value
        or len(value) > 2048
        or not value.startswith("/")
        or value.startswith(("//", "/\\"))
        or any(ord(c) < 32 or c == "\\" for c in value)
    ):
        return default
    return value
