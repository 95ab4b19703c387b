"""Engine metrics, registered on the app's Prometheus registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

TPS_BUCKETS = (0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
IMAGE_BUCKETS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 32, 64)


class EngineMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        registry = registry or CollectorRegistry()
        self.ttft = Histogram(
            "qwen_ui_engine_time_to_first_token_seconds",
            "From the question's arrival to its first answer token.",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.tokens_per_second = Histogram(
            "qwen_ui_engine_decode_tokens_per_second",
            "Decoding speed of each answer (tokens after the first, per second).",
            buckets=TPS_BUCKETS,
            registry=registry,
        )
        self.stage = Histogram(
            "qwen_ui_engine_stage_duration_seconds",
            "Time spent in each stage of a question.",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.cache = Counter(
            "qwen_ui_engine_embed_cache_lookups",
            "Image-embedding cache lookups by result (memory, redis, miss).",
            ["result"],
            registry=registry,
        )
        self.images = Histogram(
            "qwen_ui_engine_images_per_request",
            "Images attached to each question.",
            buckets=IMAGE_BUCKETS,
            registry=registry,
        )
        self.requests = Counter(
            "qwen_ui_engine_requests",
            "Questions by outcome (done, failed, cancelled).",
            ["outcome"],
            registry=registry,
        )
        self.tokens = Counter(
            "qwen_ui_engine_generated_tokens", "Answer tokens generated.", registry=registry
        )
