"""Wiring auth into the app: routes, the service on ``app.state.auth``
and Gradio's ``auth_dependency``. ``server.py`` calls these three functions."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request

from qwen_ui.auth.oss_client import quiet_oss2_logging
from qwen_ui.auth.service import AuthService
from qwen_ui.auth.web import gradio_auth_dependency
from qwen_ui.settings import Settings
from qwen_ui.state import State
from qwen_ui.web import login, oss_api


def install(app: FastAPI, settings: Settings) -> None:
    """Routes (before the Gradio mount, which catches everything under its path); browsers
    without a session are sent to /login by the request guard (``web/guard.py``)."""
    app.include_router(login.router)
    app.include_router(oss_api.router)


def start(settings: Settings, state: State) -> AuthService:
    """Built in lifespan: reads the tenants file and the server key (creating it)."""
    quiet_oss2_logging()
    return AuthService.build(settings, state)


def gradio_auth(app: FastAPI) -> Callable[[Request], Awaitable[str | None]]:
    return gradio_auth_dependency(app)
