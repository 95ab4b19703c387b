"""The app's Prometheus registry and the metrics every part shares (HTTP requests and
their durations, the engine's state); parts register their own on the same registry."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from qwen_ui.engine.status import EngineState, EngineStatus

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
        """Report ``status()`` (the default model's life cycle) at each scrape."""
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
