"""The one handler that turns a QwenUIError into the one error shape."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from qwen_ui.errors import BadRequest, QwenUIError
from qwen_ui.web.i18n import negotiate

log = logging.getLogger(__name__)


def error_response(request: Request, error: QwenUIError) -> JSONResponse:
    lang = negotiate(request.headers.get("accept-language"), request.app.state.settings.language)
    headers = {}
    if error.retry_after is not None:
        headers["Retry-After"] = str(max(1, round(error.retry_after)))
    return JSONResponse(error.to_dict(lang), status_code=error.status, headers=headers)


async def _handle_app_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, QwenUIError)
    if exc.status >= 500:
        log.warning("request failed: %s (%s)", exc.code, type(exc).__name__)
    return error_response(request, exc)


async def _handle_validation(request: Request, exc: Exception) -> JSONResponse:
    return error_response(request, BadRequest())


def install(app: FastAPI) -> None:
    app.add_exception_handler(QwenUIError, _handle_app_error)
    app.add_exception_handler(RequestValidationError, _handle_validation)
