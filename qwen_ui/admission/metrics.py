"""Admission metrics on the app's Prometheus registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

WAIT_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
REFUSALS = ("queue_full", "timeout", "never_fits")


class AdmissionMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        registry = registry or CollectorRegistry()
        self.budget = Gauge(
            "qwen_ui_admission_budget_bytes",
            "Memory budget for requests (device limit minus resident weights).",
            registry=registry,
        )
        self.in_use = Gauge(
            "qwen_ui_admission_in_use_bytes",
            "Memory reserved by admitted requests.",
            registry=registry,
        )
        self.queue = Gauge(
            "qwen_ui_admission_queue_length", "Requests waiting in line.", registry=registry
        )
        self.wait = Histogram(
            "qwen_ui_admission_wait_seconds",
            "Time from arrival to admission, of admitted requests.",
            buckets=WAIT_BUCKETS,
            registry=registry,
        )
        self.refusals = Counter(
            "qwen_ui_admission_refusals",
            "Requests refused by reason (queue_full, timeout, never_fits).",
            ["reason"],
            registry=registry,
        )
        self.downscaled = Counter(
            "qwen_ui_admission_downscaled",
            "Requests whose images were downscaled to fit the budget.",
            registry=registry,
        )
        for reason in REFUSALS:
            self.refusals.labels(reason)
