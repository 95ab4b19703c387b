"""``create_app(settings) -> FastAPI``: everything is built in ``lifespan`` and kept on
``app.state``; nothing lives in module-level globals."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from qwen_ui import __version__
from qwen_ui.engine.status import EngineStatus
from qwen_ui.settings import Settings
from qwen_ui.state import open_state
from qwen_ui.store import ModelStore
from qwen_ui.web import admission_setup, api, auth_setup, cors, errors, health, metrics
from qwen_ui.web.caller import caller_from_headers, csrf_header_check
from qwen_ui.web.guard import RequestGuard
from qwen_ui.web.uploads import UploadRegistry

log = logging.getLogger(__name__)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    app.state.state = open_state(settings.redis_url)
    app.state.auth = auth_setup.start(settings, app.state.state)
    admission_setup.start(app)
    await api.start_engine(app)
    sweeps = _start_uploads(app, settings)
    log.info(
        "qwen-ui %s starting: model %s, state %s",
        __version__,
        settings.model_id,
        app.state.state.kind,
    )
    try:
        yield
    finally:
        if sweeps is not None:
            sweeps.cancel()
        await api.stop_engine(app)
        await app.state.state.close()


def create_app(settings: Settings | None = None, ui: bool = True) -> FastAPI:
    """The whole app; ``ui=False`` leaves the Gradio UI out (and never imports Gradio), for
    API-only uses such as ``bench/bench_decode.py --web``."""
    settings = settings or Settings()
    app = FastAPI(
        title="qwen-ui",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        root_path=settings.root_path,
    )
    _init_state(app, settings)
    errors.install(app)
    app.include_router(health.router)
    app.include_router(metrics.router)
    app.include_router(api.router)
    auth_setup.install(app, settings)
    _guard(app, settings)
    cors.install(app, settings)
    app.add_middleware(metrics.MetricsMiddleware, metrics=lambda: app.state.metrics)
    trusted = [h.strip() for h in settings.forwarded_allow_ips.split(",") if h.strip()]
    app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=trusted)
    if ui:
        _mount_ui(app, settings)
    return app


def _guard(app: FastAPI, settings: Settings) -> None:
    """Credentials, origin, size and read timeout, before anything reads the body."""
    app.add_middleware(
        RequestGuard,
        settings=settings,
        caller_of=caller_from_headers(lambda: app.state.auth),
        csrf_ok=csrf_header_check(lambda: app.state.auth),
        uploads=lambda: getattr(app.state, "uploads", None),
    )


def _start_uploads(app: FastAPI, settings: Settings) -> asyncio.Task[None] | None:
    """With the UI mounted: the registry of Gradio uploads, and its periodic sweep."""
    folder: Path | None = getattr(app.state, "upload_folder", None)
    if folder is None:
        return None
    registry = UploadRegistry(app.state.state, folder, settings.conversation_ttl_s)
    app.state.uploads = registry
    return asyncio.create_task(registry.run_sweeps())


def _init_state(app: FastAPI, settings: Settings) -> None:
    """Cheap, synchronous parts the routes read; I/O-bound parts come in ``lifespan``."""
    app.state.settings = settings
    app.state.engine_status = EngineStatus()
    app.state.store = ModelStore(settings.model_path)
    app.state.metrics = metrics.Metrics()
    app.state.metrics.watch_engine(lambda: app.state.engine_status)
    admission_setup.init(app)
    api.init(app)


def _mount_ui(app: FastAPI, settings: Settings) -> None:
    _inside_event_loop(lambda: _mount_gradio(app, settings))


def _inside_event_loop(build: Callable[[], None]) -> None:
    """Gradio makes (and leaks) a new event loop when built outside a running one; give
    it a short-lived loop that ``asyncio.run`` closes."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:

        async def run() -> None:
            build()

        asyncio.run(run())
        return
    build()


def _mount_gradio(app: FastAPI, settings: Settings) -> None:
    import gradio as gr

    from qwen_ui.web.theme import load_theme
    from qwen_ui.web.ui import build_ui

    app.state.upload_folder = Path(gr.utils.get_upload_folder())
    theme = load_theme(settings.themes_dir, settings.theme)
    footer: list[str] = ["gradio", "settings"] + (["api"] if settings.show_api else [])
    gr.mount_gradio_app(
        app,
        build_ui(app),
        path=settings.ui_path,
        auth_dependency=auth_setup.gradio_auth(app),
        theme=theme.theme,
        css_paths=theme.css_paths,
        footer_links=footer,
        max_file_size=settings.max_image_bytes,
        ssr_mode=False,
        pwa=False,
        enable_monitoring=False,
        mcp_server=False,
    )
