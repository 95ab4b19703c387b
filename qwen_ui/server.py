"""``create_app(settings) -> FastAPI``: routes, middlewares and the Gradio mount; its
lifespan builds the app's :class:`~qwen_ui.services.Services` once and closes them at
shutdown. Nothing lives in module-level globals; only the services module touches the
app's state."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from qwen_ui import __version__
from qwen_ui.models.reload import off_sighup, on_sighup
from qwen_ui.services import ServedStore, Services, attach, maybe_services, services_of
from qwen_ui.settings import Settings
from qwen_ui.web import (
    admin,
    api,
    conversations_api,
    cors,
    errors,
    gradio_files,
    health,
    login,
    metrics,
    openai_api,
    oss_api,
)
from qwen_ui.web.auth import gradio_auth_dependency
from qwen_ui.web.caller import caller_from_headers, csrf_header_check
from qwen_ui.web.guard import RequestGuard

log = logging.getLogger(__name__)

Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


def lifespan_of(
    settings: Settings,
    store: ServedStore | None = None,
    install_demo: bool = False,
    page: PageFiles | None = None,
) -> Lifespan:
    """The app's lifespan: start the services, attach them to the app, close them.
    ``page``: Gradio's upload folder and the page's own files in it, when the UI is mounted
    (its uploads are kept private)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        services = await Services.start(settings, store, install_demo)
        if page is not None:
            services.watch_uploads(page.folder, page.own)
        attach(app, services)
        log.info(
            "qwen-ui %s starting: models %s (default first), state %s",
            __version__,
            ", ".join(services.models.names),
            services.state.kind,
        )
        hangup = on_sighup(settings, services.models)  # re-reads the model list
        try:
            yield
        finally:
            if hangup:
                off_sighup()
            attach(app, None)
            await services.close()

    return lifespan


def create_app(
    settings: Settings | None = None,
    ui: bool = True,
    store: ServedStore | None = None,
    install_demo: bool = False,
) -> FastAPI:
    """The whole app; ``ui=False`` leaves the Gradio UI out (and never imports Gradio), for
    API-only uses such as ``bench/bench_decode.py --web``. ``store``: serve from this
    store instead of the settings' model store (benches); ``install_demo``: install the
    shipped demo at start-up when it is the configured model (``qwen-ui serve``)."""
    settings = settings or Settings()
    page = PageFiles(_upload_folder()) if ui else None
    app = FastAPI(
        title="qwen-ui",
        version=__version__,
        lifespan=lifespan_of(settings, store, install_demo, page),
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        root_path=settings.root_path,
    )
    errors.install(app)
    # routes before the Gradio mount, which catches everything under its path
    routers = (health.router, metrics.router, api.router, openai_api.router, login.router)
    for router in (*routers, oss_api.router, conversations_api.router, admin.router):
        app.include_router(router)
    _guard(app, settings)
    cors.install(app, settings)  # outside the guard: preflights carry no credentials
    app.add_middleware(metrics.MetricsMiddleware)
    trusted = [h.strip() for h in settings.forwarded_allow_ips.split(",") if h.strip()]
    app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=trusted)
    if page is not None:
        _mount_ui(app, settings, page)
    return app


def _guard(app: FastAPI, settings: Settings) -> None:
    """Credentials, origin, size and read timeout, before anything reads the body."""
    app.add_middleware(
        RequestGuard,
        settings=settings,
        caller_of=caller_from_headers(lambda: services_of(app).auth),
        csrf_ok=csrf_header_check(lambda: services_of(app).auth),
        uploads=lambda: getattr(maybe_services(app), "uploads", None),
    )


@dataclass
class PageFiles:
    """Gradio's upload folder, and the page's own files in it (its examples, copied there
    when the page is built), which every logged-in principal may read."""

    folder: Path
    own: list[str] = field(default_factory=list)


def _upload_folder() -> Path:
    from gradio.utils import get_upload_folder

    return Path(get_upload_folder()).resolve()


def _mount_ui(app: FastAPI, settings: Settings, page: PageFiles) -> None:
    _inside_event_loop(lambda: _mount_gradio(app, settings, page))


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


def _mount_gradio(app: FastAPI, settings: Settings, page: PageFiles) -> None:
    import gradio as gr

    from qwen_ui.web.theme import load_theme
    from qwen_ui.web.ui import build_ui

    theme = load_theme(settings.themes_dir, settings.theme)
    # no "settings" link: Gradio's settings panel offers a second language selector (for its
    # own labels only), a PWA hint and Screen Studio, none of which work here
    footer: list[str] = ["gradio"] + (["api"] if settings.show_api else [])
    blocks = build_ui(app, settings)
    gr.mount_gradio_app(
        app,
        blocks,
        path=settings.ui_path,
        auth_dependency=gradio_auth_dependency(app),
        theme=theme.theme,
        css_paths=theme.css_paths,
        footer_links=footer,
        max_file_size=settings.max_image_bytes,
        ssr_mode=False,
        pwa=False,
        enable_monitoring=False,
        mcp_server=False,
        allowed_paths=[],
        blocked_paths=_blocked_paths(settings, page.folder),
    )
    # The second wall: Gradio checks the paths of values against its upload folder, and
    # of outputs against its allowed and blocked paths, only once ``launch()`` ran, which a
    # mounted app never does (``processing_utils._check_allowed``).
    blocks.has_launched = True
    page.own = gradio_files.paths_in(blocks.config)


def _blocked_paths(settings: Settings, uploads: Path) -> list[str]:
    """What Gradio must never read or serve: the server's secrets and models, the system's
    folders (the upload folder is never inside one of them)."""
    candidates = [
        settings.home,
        settings.tenants_path,
        settings.key_path,
        settings.model_path,
        *(Path(p) for p in ("/etc", "/proc", "/sys", "/dev", "/root", "/boot")),
    ]
    resolved = [p.resolve() for p in candidates]
    return [str(p) for p in resolved if not uploads.is_relative_to(p)]
