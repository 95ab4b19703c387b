"""The one handler that turns a QwenUIError into the one error shape."""

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
)
from qwen_ui.services import maybe_services
from qwen_ui.web.i18n import negotiate

log = logging.getLogger(__name__)


def error_response(request: Request, error: QwenUIError) -> JSONResponse:
    services = maybe_services(request.app)  # none yet: the browser's language decides
    configured = services.settings.language if services is not None else "auto"
    lang = negotiate(request.headers.get("accept-language"), configured)
    headers = {}
    if error.retry_after is not None:
        headers["Retry-After"] = str(max(1, round(error.retry_after)))
    return JSONResponse(error.to_dict(lang), status_code=error.status, headers=headers)


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
