"""The server's Prometheus metrics, in a registry of its own (two servers in one process never mix).

Requests are counted by endpoint and status by an ASGI middleware that sees every response,
streamed ones included, and times each until its last byte. Tokens and time to first token are
recorded by the generation endpoints; the engine's running and waiting requests (and whatever else
`engine.stats()` reports) are read at each scrape.
"""

import time
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

# Seconds: from a few milliseconds (a cached prompt on a small model) to minutes (a long reply).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class ServerMetrics:
    """Every metric the server exports; `render()` is the body of GET /metrics."""

    def __init__(self, engine_stats: Callable[[], dict]):
        self.registry = CollectorRegistry()
        self.requests = Counter("lmlab_requests", "HTTP requests answered, by endpoint and status code",
                                ["endpoint", "status"], registry=self.registry)
        self.request_duration = Histogram("lmlab_request_duration_seconds",
                                          "time from a request's arrival to its response's last byte",
                                          ["endpoint"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.prompt_tokens = Counter("lmlab_prompt_tokens", "prompt tokens of the generation requests",
                                     registry=self.registry)
        self.generated_tokens = Counter("lmlab_generated_tokens", "tokens generated", registry=self.registry)
        self.time_to_first_token = Histogram("lmlab_time_to_first_token_seconds",
                                             "time from a generation request's arrival to its first token",
                                             buckets=LATENCY_BUCKETS, registry=self.registry)
        self.registry.register(_EngineCollector(engine_stats))

    def render(self) -> tuple[bytes, str]:
        """(body, content type) of the Prometheus text format."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _EngineCollector:
    """`engine.stats()` at scrape time, one gauge per number: lmlab_engine_running, _waiting, _slots, …"""

    def __init__(self, engine_stats: Callable[[], dict]):
        self.engine_stats = engine_stats

    def collect(self):
        for key, value in self.engine_stats().items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                yield GaugeMetricFamily(f"lmlab_engine_{key}", f"the engine's {key} (engine.stats())", value=value)


class MetricsMiddleware:
    """Counts and times every HTTP request by endpoint (a known path, else "other") and status."""

    def __init__(self, app, metrics: ServerMetrics, endpoints: set[str]):
        self.app = app
        self.metrics = metrics
        self.endpoints = endpoints

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        endpoint = scope["path"] if scope["path"] in self.endpoints else "other"
        start = time.perf_counter()
        status = 500  # what the client gets if the app fails before answering

        async def send_and_record(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_record)
        finally:
            self.metrics.requests.labels(endpoint, str(status)).inc()
            self.metrics.request_duration.labels(endpoint).observe(time.perf_counter() - start)
