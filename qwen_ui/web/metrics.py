"""Prometheus over HTTP: the middleware counting requests and the /metrics route (the
registry itself is :mod:`qwen_ui.metrics`, on the app's services)."""

from __future__ import annotations

import hmac
import time

from fastapi import APIRouter, Request, Response
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from qwen_ui.errors import Unauthorized
from qwen_ui.metrics import Metrics
from qwen_ui.services import ServicesDep, maybe_services


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
    """Pure ASGI middleware (streaming-safe) counting requests and their durations on the
    metrics of the app's services (requests before they started are not counted)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        services = maybe_services(scope.get("app"))  # before a mounted app replaces it
        status = {"code": 500}
        start = time.perf_counter()

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            if services is not None:
                _record(services.metrics, scope, status["code"], time.perf_counter() - start)


def _record(metrics: Metrics, scope: Scope, code: int, seconds: float) -> None:
    route, method = route_label(scope), scope.get("method", "GET")
    metrics.requests.labels(route, method, str(code)).inc()
    metrics.latency.labels(route, method).observe(seconds)


router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def metrics_endpoint(request: Request, services: ServicesDep) -> Response:
    token = services.settings.metrics_token
    if token is not None and not _bearer_matches(request, token.get_secret_value()):
        raise Unauthorized()
    return Response(services.metrics.render(), media_type=CONTENT_TYPE_LATEST)


def _bearer_matches(request: Request, expected: str) -> bool:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.encode(), expected.encode())
