"""Each offered model on ``/metrics``: its state and its requests in flight."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

STATES = ("not_loaded", "loading", "ready", "failed", "draining")


class ModelsCollector(Collector):
    """``rows()``: :meth:`ModelRegistry.health`'s rows, read at each scrape."""

    def __init__(self, rows: Callable[[], list[dict[str, Any]]]) -> None:
        self._rows = rows

    def collect(self) -> Iterator[GaugeMetricFamily]:
        rows = self._rows()
        state = GaugeMetricFamily(
            "qwen_ui_model_state", "1 for each model's current state.", labels=["model", "state"]
        )
        in_flight = GaugeMetricFamily(
            "qwen_ui_model_requests_in_flight",
            "Requests each model is running or holding in line.",
            labels=["model"],
        )
        for row in rows:
            for name in STATES:
                state.add_metric([row["model"], name], 1.0 if row["state"] == name else 0.0)
            in_flight.add_metric([row["model"]], float(row["in_flight"]))
        yield state
        yield in_flight
