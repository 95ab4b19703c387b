"""The one handler that turns a QwenUIError into the one error shape, and the one
builder of error responses (:func:`failure_response`) every route uses."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from qwen_ui.errors import (
    BadRequest,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    QwenUIError,
    TooManyRequests,
    Unauthorized,
    error_body,
)
from qwen_ui.lang import Lang, negotiate
from qwen_ui.services import maybe_services
from qwen_ui.web import openai_wire
from qwen_ui.web.guard import local_path

log = logging.getLogger(__name__)


def request_lang(request: Request, chosen: str | None = None) -> Lang:
    """The request's language: ``chosen`` (a form field, a query parameter), else the
    configured one, else the browser's (:func:`qwen_ui.lang.negotiate`)."""
    services = maybe_services(request.app)  # none yet: the browser's language decides
    configured = services.settings.language if services is not None else "auto"
    return negotiate(request.headers.get("accept-language"), configured, chosen)


def failure_response(
    code: str, message: str, status: int, retry_after: float | None = None
) -> JSONResponse:
    """The one error response: the one error shape, with ``Retry-After`` when busy."""
    headers = {}
    if retry_after is not None:
        headers["Retry-After"] = str(max(1, round(retry_after)))
    body = error_body(code, message, status, retry_after)
    return JSONResponse(body, status_code=status, headers=headers)


def error_response(request: Request, error: QwenUIError) -> JSONResponse:
    """``error`` as the one error response, in the request's language (under /v1/, in
    OpenAI's error object)."""
    lang = request_lang(request)
    path = local_path(request.scope)
    if openai_wire.is_openai_path(path):
        response = failure_response(error.code, "", error.status, error.retry_after)
        return JSONResponse(
            openai_wire.body_for(path, error, lang),
            status_code=error.status,
            headers={k: v for k, v in response.headers.items() if k == "retry-after"},
        )
    return failure_response(error.code, error.message(lang), error.status, error.retry_after)


async def _handle_app_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, QwenUIError)
    if exc.status >= 500:
        log.warning("request failed: %s (%s)", exc.code, type(exc).__name__)
    return error_response(request, exc)


_BY_STATUS: dict[int, type[QwenUIError]] = {
    error.status: error
    for error in (BadRequest, Unauthorized, Forbidden, NotFound, PayloadTooLarge, TooManyRequests)
}


async def _handle_http(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own HTTP errors (404, 405, ...) in the one error shape."""
    assert isinstance(exc, StarletteHTTPException)
    error = _BY_STATUS.get(exc.status_code, BadRequest if exc.status_code < 500 else QwenUIError)
    response = error_response(request, error())
    response.status_code = exc.status_code
    return response


async def _handle_validation(request: Request, exc: Exception) -> JSONResponse:
    return error_response(request, BadRequest())


def install(app: FastAPI) -> None:
    app.add_exception_handler(QwenUIError, _handle_app_error)
    app.add_exception_handler(RequestValidationError, _handle_validation)
    app.add_exception_handler(StarletteHTTPException, _handle_http)
