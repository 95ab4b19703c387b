"""Prometheus metrics: one registry per app, HTTP middleware, the /metrics route."""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from fastapi import APIRouter, Request, Response
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from qwen_ui.engine.status import EngineState, EngineStatus
from qwen_ui.errors import Unauthorized

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


@dataclass
class Metrics:
    """The app's registry and the metrics every part shares; parts may register more."""

    registry: CollectorRegistry = field(
        default_factory=lambda: CollectorRegistry(auto_describe=True)
    )

    def __post_init__(self) -> None:
        self.requests = Counter(
            "qwen_ui_http_requests",
            "HTTP requests by route template, method and status.",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "qwen_ui_http_request_duration_seconds",
            "HTTP request duration by route template, until the response ends.",
            ["route", "method"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def watch_engine(self, status: Callable[[], EngineStatus]) -> None:
        self.registry.register(_EngineCollector(status))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _EngineCollector(Collector):
    def __init__(self, status: Callable[[], EngineStatus]) -> None:
        self._status = status

    def collect(self) -> Iterator[GaugeMetricFamily]:
        current = self._status()
        family = GaugeMetricFamily(
            "qwen_ui_engine_state", "1 for the engine's current state.", labels=["state"]
        )
        for state in EngineState:
            family.add_metric([state.value], 1.0 if current.state is state else 0.0)
        yield family
        answered = GaugeMetricFamily(
            "qwen_ui_engine_answers", "Questions answered since start.", value=current.answered
        )
        yield answered


def route_label(scope: Scope) -> str:
    """The matched route's template (bounded cardinality); 'unmatched' otherwise."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if not path:
        return "unmatched"
    mount = scope.get("root_path", "") or ""
    app_root = scope.get("app_root_path", "") or ""
    prefix = mount[len(app_root) :] if mount.startswith(app_root) else mount
    return f"{prefix}{path}" or "/"


class MetricsMiddleware:
    """Pure ASGI middleware (streaming-safe) counting requests and their durations."""

    def __init__(self, app: ASGIApp, metrics: Callable[[], Metrics | None]) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = {"code": 500}
        start = time.perf_counter()

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            self._record(scope, status["code"], time.perf_counter() - start)

    def _record(self, scope: Scope, code: int, seconds: float) -> None:
        metrics = self.metrics()
        if metrics is None:
            return
        route, method = route_label(scope), scope.get("method", "GET")
        metrics.requests.labels(route, method, str(code)).inc()
        metrics.latency.labels(route, method).observe(seconds)


router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def metrics_endpoint(request: Request) -> Response:
    token = request.app.state.settings.metrics_token
    if token is not None and not _bearer_matches(request, token.get_secret_value()):
        raise Unauthorized()
    body = request.app.state.metrics.render()
    return Response(body, media_type=CONTENT_TYPE_LATEST)


def _bearer_matches(request: Request, expected: str) -> bool:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.encode(), expected.encode())
