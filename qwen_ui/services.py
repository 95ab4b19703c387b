"""The app's shared objects in one typed place: :class:`Services`.

``create_app(settings)``'s lifespan builds them once (:meth:`Services.start`) and closes
them at shutdown (:meth:`Services.close`). Everything that serves a request reaches them
through one accessor: routes through the FastAPI dependency :data:`ServicesDep`, Gradio
handlers and middlewares through :func:`services_of` on the app. Nothing else is kept on
``app.state``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Protocol

from fastapi import Depends, Request

from qwen_ui.admission.metrics import AdmissionMetrics
from qwen_ui.admission.seam import EngineAdmission
from qwen_ui.admission.seam import build as build_admission
from qwen_ui.auth.oss_client import quiet_oss2_logging
from qwen_ui.auth.service import AuthService
from qwen_ui.demo.install import DemoInstallingStore
from qwen_ui.engine.conversations import ConversationStore
from qwen_ui.engine.engine import Engine
from qwen_ui.engine.facts import placement
from qwen_ui.engine.metrics import EngineMetrics
from qwen_ui.engine.remote import RemoteEngine
from qwen_ui.engine.status import EngineStatus
from qwen_ui.errors import NotStarted
from qwen_ui.metrics import Metrics
from qwen_ui.models.host import EngineHost
from qwen_ui.models.memory import WeightLedger
from qwen_ui.models.metrics import ModelsCollector
from qwen_ui.models.registry import ModelRegistry
from qwen_ui.models.routes import ConversationModels
from qwen_ui.settings import Settings
from qwen_ui.state import State, open_state
from qwen_ui.uploads import UploadRegistry

log = logging.getLogger(__name__)

_KEY = "services"  # the one attribute of ``app.state`` this module owns


class ServedStore(Protocol):
    """What serving needs of the model store (a ``ModelStore``; benches pass their own)."""

    def resolve(self, model_id: str, revision: str) -> Any: ...

    def is_installed(self, model_id: str, revision: str) -> bool: ...


@dataclass
class Services:
    """The shared objects of one running app."""

    settings: Settings
    metrics: Metrics
    store: ServedStore
    state: State
    auth: AuthService
    models: ModelRegistry
    conversations: ConversationStore
    uploads: UploadRegistry | None = None  # with the UI: owners of Gradio's uploads
    answering: bool = True  # False once closed
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def engine(self) -> Engine | RemoteEngine:
        """The default model's engine (created now when it has none; nothing loads)."""
        return self.models.current(self.models.default).engine

    @property
    def status(self) -> EngineStatus:
        """The default model's life cycle."""
        return self.models.default.status

    @property
    def admission(self) -> EngineAdmission:
        """The default model's admission seam (the line is shared by every model)."""
        admission = self.models.current(self.models.default).admission
        assert admission is not None, "the remote engine admits by count"
        return admission

    @classmethod
    async def start(
        cls, settings: Settings, store: ServedStore | None = None, install_demo: bool = False
    ) -> Services:
        """Open the state store, read the tenants, start the engine's worker (the model
        itself loads on the first question, or now and warmed up with ``preload``, the
        default on CUDA).
        ``install_demo``: install the shipped demo now when it is the configured model and
        missing (``qwen-ui serve``); otherwise the first question installs it."""
        quiet_oss2_logging()
        store = store or DemoInstallingStore(settings.model_path)
        if install_demo and settings.is_demo_model and settings.engine == "local":
            await asyncio.to_thread(store.resolve, settings.model_id, settings.model_revision)
        metrics = Metrics()
        state = open_state(settings.redis_url)
        try:
            auth = AuthService.build(settings, state)
        except BaseException:
            await state.close()
            raise
        models = build_registry(settings, store, state, metrics, auth)
        metrics.watch_engine(lambda: models.default.status)
        metrics.registry.register(ModelsCollector(models.health))
        conversations = ConversationStore(
            state, settings.conversation_ttl_s, settings.conversations_per_user
        )
        services = cls(settings, metrics, store, state, auth, models, conversations)
        engine = models.current(models.default).engine  # the default's, started now
        if isinstance(engine, Engine) and engine.fast_path.preload:  # load, then warm up
            services._tasks.append(asyncio.create_task(models.preload_default()))
        elif isinstance(engine, RemoteEngine) and settings.preload is True:
            services._tasks.append(asyncio.create_task(engine.preload()))
        return services

    def watch_uploads(self, folder: Path, page_files: Iterable[str] = ()) -> None:
        """Keep Gradio's upload folder private and swept (the UI is mounted); the page's
        own files in it are every logged-in principal's."""
        self.uploads = UploadRegistry(self.state, folder, self.settings.conversation_ttl_s)
        self.uploads.share(page_files)
        self._tasks.append(asyncio.create_task(self.uploads.run_sweeps()))

    async def close(self) -> None:
        self.answering = False
        for task in self._tasks:
            task.cancel()
        try:
            await self.models.close()
        finally:
            await self.state.close()


def build_registry(
    settings: Settings, store: ServedStore, state: State, metrics: Metrics, auth: AuthService
) -> ModelRegistry:
    """The offered models over one admission line: the local ones (``QWEN_UI_MODELS``, or
    the one model), or with ``engine=openai`` the remote model (admitted by count)."""
    routes = ConversationModels(state, settings.conversation_ttl_s)
    where = placement(settings)
    admission_metrics = AdmissionMetrics(metrics.registry)
    line = build_admission(settings, where, admission_metrics, auth.tenant_limit).controller
    host = EngineHost(settings, store, state, EngineMetrics(metrics.registry), line, auth)
    if settings.engine == "openai":
        return ModelRegistry(
            [settings.remote_model], host, None, routes, settings.queue_timeout_s, remote=True
        )
    host.ledger = WeightLedger(settings, where, line)
    return ModelRegistry(settings.model_refs, host, host.ledger, routes, settings.queue_timeout_s)


def attach(app: Any, services: Services | None) -> None:
    """Make ``services`` the app's (None: detach them at shutdown)."""
    setattr(app.state, _KEY, services)


def maybe_services(app: Any) -> Services | None:
    """The app's services, or None before they started (and after shutdown)."""
    state = getattr(app, "state", None)
    found = getattr(state, _KEY, None)
    return found if isinstance(found, Services) else None


def services_of(app: Any) -> Services:
    """The app's services; a typed 503 ("starting") before they started."""
    found = maybe_services(app)
    if found is None:
        raise NotStarted(retry_after=1)
    return found


def get_services(request: Request) -> Services:
    """The FastAPI dependency every route uses to reach the services."""
    return services_of(request.app)


ServicesDep = Annotated[Services, Depends(get_services)]
