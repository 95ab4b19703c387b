"""The login and logout routes (FastAPI owns them, not Gradio).

``GET /login`` sets a CSRF nonce cookie and shows the form; ``POST /login`` checks the
CSRF token and Origin, then the tenant's verifier; success replaces any old session
with a new one (new id) and redirects to ``next``. Failures re-render the form with the
error's status (401 for every wrong credential, 429 + Retry-After, 503, 403), or answer
the JSON error shape to clients that ask for JSON. ``GET /logout`` shows a confirmation
form; ``POST /logout`` deletes the session server-side. ``GET /api/v1/me`` says who is
logged in.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from qwen_ui.auth import csrf
from qwen_ui.auth.audit import request_id_from
from qwen_ui.auth.errors import BadExpiration, CsrfFailed
from qwen_ui.auth.principal import Credentials, OSSCredentials, PasswordCredentials
from qwen_ui.auth.service import LoginAttempt
from qwen_ui.errors import PayloadTooLarge, QwenUIError
from qwen_ui.lang import Lang, is_lang
from qwen_ui.services import Services, ServicesDep
from qwen_ui.texts import t
from qwen_ui.web.auth import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    PrincipalDep,
    clear_cookie,
    read_cookie,
    safe_next,
    set_cookie,
)
from qwen_ui.web.errors import error_response, request_lang
from qwen_ui.web.login_page import LoginForm, render_login, render_logout, security_headers
from qwen_ui.web.origin import from_this_site

log = logging.getLogger(__name__)

router = APIRouter()

MAX_FORM_BYTES = 64 * 1024
MAX_FIELD_CHARS = 8192
CSRF_MAX_AGE = 2 * 3600


def page_lang(request: Request, chosen: str | None = None) -> Lang:
    """The form's field, else the ``lang`` query parameter, else :func:`request_lang`."""
    return request_lang(request, chosen if is_lang(chosen) else request.query_params.get("lang"))


def _check_origin(request: Request) -> None:
    """A form post's ``Origin`` (when sent) is this site's: scheme, host and port."""
    headers = request.headers
    if not from_this_site(headers.get("origin"), headers.get("host"), request.url.scheme):
        raise CsrfFailed()


def _default_method(services: Services) -> str:
    tenants = services.auth.registry.all()
    return "local" if any(t.kind == "local" for t in tenants) else "oss"


def _html(body: str, status: int = 200, headers: dict[str, str] | None = None) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers={**security_headers(), **(headers or {})})


def _csrf_nonce(request: Request) -> tuple[str, bool]:
    """The CSRF nonce of this browser (from its cookie) and whether it is new."""
    nonce = read_cookie(request, CSRF_COOKIE)
    if nonce and len(nonce) <= 64:
        return nonce, False
    return csrf.new_nonce(), True


def _form_page(
    request: Request,
    services: Services,
    lang: Lang,
    form: LoginForm,
    status: int = 200,
    headers: dict[str, str] | None = None,
) -> Response:
    nonce, fresh = _csrf_nonce(request)
    token = csrf.token_for(services.auth.keys, nonce)
    response = _html(render_login(lang, replace(form, csrf=token)), status, headers)
    if fresh:
        set_cookie(response, request, CSRF_COOKIE, nonce, max_age=CSRF_MAX_AGE)
    return response


@router.get("/login", include_in_schema=False)
async def login_page(request: Request, services: ServicesDep) -> Response:
    lang = page_lang(request)
    ui_path = services.settings.ui_path
    form = LoginForm(
        csrf="",
        next=safe_next(request.query_params.get("next"), ui_path),
        tenant=request.query_params.get("tenant", "")[:64],
        method=request.query_params.get("method") or _default_method(services),
        notice=t("logged_out", lang) if request.query_params.get("logged_out") else None,
    )
    return _form_page(request, services, lang, form)


def _field(form: Any, name: str) -> str:
    value = form.get(name)
    return value[:MAX_FIELD_CHARS] if isinstance(value, str) else ""


def _credentials(form: Any) -> Credentials:
    if _field(form, "method") == "local":
        return PasswordCredentials(
            user=_field(form, "user").strip(), password=_field(form, "password")
        )
    return OSSCredentials(
        key_id=_field(form, "key_id").strip(),
        secret=_field(form, "key_secret").strip(),
        sts_token=_field(form, "sts_token").strip() or None,
    )


def _not_after(form: Any) -> float | None:
    """The optional STS expiration (ISO 8601, as AssumeRole returns it) as epoch seconds."""
    text = _field(form, "sts_expiration").strip()
    if not text or _field(form, "method") == "local":
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise BadExpiration() from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def _client_ip(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _wants_json(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


@router.post("/login", include_in_schema=False)
async def login_submit(request: Request, services: ServicesDep) -> Response:
    if int(request.headers.get("content-length") or 0) > MAX_FORM_BYTES:
        return error_response(request, PayloadTooLarge())
    form = await request.form(max_files=0, max_fields=20)
    service = services.auth
    lang = page_lang(request, _field(form, "lang"))
    target = safe_next(_field(form, "next"), services.settings.ui_path)
    credentials = _credentials(form)
    try:
        _check_origin(request)
        csrf.check(service.keys, read_cookie(request, CSRF_COOKIE), _field(form, "csrf"))
        attempt = LoginAttempt(
            tenant=_field(form, "tenant").strip(),
            credentials=credentials,
            ip=_client_ip(request),
            request_id=request_id_from(request.headers.get("x-request-id")),
            not_after=_not_after(form),
        )
        session_id, session = await service.login(attempt)
    except QwenUIError as error:
        return _login_failed(request, services, lang, form, target, error)
    old = read_cookie(request, SESSION_COOKIE)
    if old:
        await service.sessions.delete(old)
        log.debug(
            "login by %s replaced the browser's old session (new id)", session.principal.label
        )
    root = request.scope.get("root_path", "") or ""
    response: Response = RedirectResponse(root + target, status_code=303)
    if _wants_json(request):
        response = JSONResponse({"tenant": session.tenant, "user": session.user})
    max_age = int(max(1, session.expires - service.clock()))
    set_cookie(response, request, SESSION_COOKIE, session_id, max_age=max_age)
    response.headers["Cache-Control"] = "no-store"
    return response


def _login_failed(
    request: Request, services: Services, lang: Lang, form: Any, target: str, error: QwenUIError
) -> Response:
    if _wants_json(request):
        return error_response(request, error)
    method = "local" if _field(form, "method") == "local" else "oss"
    shown = LoginForm(
        csrf="",
        next=target,
        tenant=_field(form, "tenant")[:64],
        method=method,
        key_id=_field(form, "key_id")[:128] if method == "oss" else "",
        user=_field(form, "user")[:64] if method == "local" else "",
        error=error.message(lang),
    )
    headers = {}
    if error.retry_after is not None:
        headers["Retry-After"] = str(max(1, round(error.retry_after)))
    return _form_page(request, services, lang, shown, error.status, headers)


@router.get("/logout", include_in_schema=False)
async def logout_page(request: Request, services: ServicesDep) -> Response:
    lang = page_lang(request)
    session_id = read_cookie(request, SESSION_COOKIE)
    session = await services.auth.resolve(session_id)
    if session is None or session_id is None:
        return RedirectResponse((request.scope.get("root_path", "") or "") + "/login", 303)
    token = csrf.token_for(services.auth.keys, session_id)
    back = (request.scope.get("root_path", "") or "") + services.settings.ui_path
    return _html(render_logout(lang, token, session.principal.label, back))


@router.post("/logout", include_in_schema=False)
async def logout_submit(request: Request, services: ServicesDep) -> Response:
    service = services.auth
    session_id = read_cookie(request, SESSION_COOKIE)
    form = await request.form(max_files=0, max_fields=5)
    _check_origin(request)
    submitted = _field(form, "csrf") or request.headers.get("x-csrf-token")
    if session_id:
        csrf.check(service.keys, session_id, submitted)
        await service.logout(session_id, request_id_from(request.headers.get("x-request-id")))
    root = request.scope.get("root_path", "") or ""
    response = RedirectResponse(f"{root}/login?logged_out=1", status_code=303)
    clear_cookie(response, request, SESSION_COOKIE)
    return response


@router.get("/api/v1/me")
async def whoami(request: Request, principal: PrincipalDep, services: ServicesDep) -> JSONResponse:
    """Who is calling; where the tenant's OSS objects are (region, endpoint, bucket and
    prefix, for an OSS tenant: ``qwen-ui batch`` reads ``oss://`` rows there with the
    caller's own keys); for a browser session also the CSRF token that logout needs."""
    body: dict[str, Any] = {
        "tenant": principal.tenant,
        "user": principal.user,
        "method": principal.method,
    }
    tenant = services.auth.registry.get(principal.tenant)
    if tenant is not None and tenant.oss is not None:
        body["oss"] = tenant.oss.model_dump(include={"region", "endpoint", "bucket", "prefix"})
    session_id = read_cookie(request, SESSION_COOKIE)
    if principal.method != "token" and session_id:
        body["logout_csrf"] = csrf.token_for(services.auth.keys, session_id)
    return JSONResponse(body, headers={"Cache-Control": "no-store"})
