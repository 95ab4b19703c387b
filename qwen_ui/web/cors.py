"""Cross-origin access: none unless ``cors_origins`` lists the origins.

Gradio's ``mount_gradio_app`` adds its own CORS middleware that echoes any ``Origin`` with
``Access-Control-Allow-Credentials: true`` on every route when the host is not localhost,
unless the parent app already has Starlette's :class:`CORSMiddleware` (gradio
``route_utils.CustomCORSMiddleware.parent_configures_cors``). So the app always gets one,
even with no origin allowed: then no response carries ``Access-Control-Allow-Origin``.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from qwen_ui.settings import Settings


def install(app: FastAPI, settings: Settings) -> None:
    """Add the CORS policy (must be outside the request guard: preflights carry no
    credentials)."""
    origins = list(settings.cors_origin_list)
    app.add_middleware(
        CORSMiddleware,
        allow_origins=origins,
        allow_credentials=bool(origins),
        allow_methods=["GET", "HEAD", "POST", "OPTIONS"],
        allow_headers=["authorization", "content-type", "x-csrf-token", "accept-language"],
        max_age=600,
    )
