"""Prometheus metrics of one serving process: requests and latencies per route, cache, index, traces.

What describes the data is rendered for the caller: ``livemem_index_chunks`` counts only the chunks of access
levels the caller's role may read, so a scrape without a key learns nothing about hidden collections.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from livemem.usage.traces import SCRAPE_FLUSH_WAIT_S

if TYPE_CHECKING:
    from serving.state import ServingState

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class _StateCollector:
    """Reads the cache, reader and trace counters at scrape time (they are the single source of truth)."""

    def __init__(self, state: ServingState) -> None:
        self.state = state

    def collect(self):
        cache, reader, traces = self.state.cache, self.state.reader, self.state.traces
        # queued trace events (livemem.usage.traces) are written, so their counters are exact, unless the trace
        # file is locked elsewhere: then the scrape answers with the counts so far instead of waiting
        traces.flush(wait_s=SCRAPE_FLUSH_WAIT_S)
        yield CounterMetricFamily("livemem_cache_hits", "query results answered from the cache", value=cache.hits)
        yield CounterMetricFamily("livemem_cache_misses", "query results computed", value=cache.misses)
        yield GaugeMetricFamily("livemem_cache_entries", "entries in the result cache", value=len(cache))
        yield CounterMetricFamily("livemem_trace_events", "trace events written", value=traces.written)
        yield CounterMetricFamily("livemem_trace_write_failures", "trace writes that failed", value=traces.failures)
        yield CounterMetricFamily(
            "livemem_trace_events_dropped", "trace events dropped: the queue was full", value=traces.dropped
        )
        yield CounterMetricFamily("livemem_index_swaps", "switches to a newly published version", value=reader.swaps)
        snap = reader.loaded
        info = GaugeMetricFamily("livemem_index_info", "the index version being served", labels=["version", "model"])
        if snap is not None:
            info.add_metric([snap.version_id, snap.model_id], 1)
            yield GaugeMetricFamily(
                "livemem_index_loaded_timestamp_seconds", "when the served version was loaded", value=snap.loaded_at
            )
        yield info


class _VisibleIndexCollector:
    """The served version's size as the caller may know it: chunks of the access levels its role reads."""

    def __init__(self, state: ServingState, access: frozenset[str]) -> None:
        self.state = state
        self.access = access

    def collect(self):
        snap = self.state.reader.loaded
        if snap is not None:
            visible = int(np.isin(snap.columns["access"], np.array(sorted(self.access), dtype=object)).sum())
            yield GaugeMetricFamily(
                "livemem_index_chunks", "chunks in the served version that the caller's role may read", value=visible
            )


class Metrics:
    def __init__(self, state: ServingState) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "livemem_http_requests", "HTTP requests", ["route", "method", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "livemem_http_request_duration_seconds",
            "time to answer, per route",
            ["route", "method"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.state = state
        self.registry.register(_StateCollector(state))

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route, method).observe(seconds)

    def render(self, access: frozenset[str]) -> bytes:
        """The text format for a caller whose role reads ``access``."""
        visible = CollectorRegistry()
        visible.register(_VisibleIndexCollector(self.state, access))
        return generate_latest(self.registry) + generate_latest(visible)


class MetricsMiddleware:
    """Pure ASGI middleware timing every HTTP request under its route template (``/chunks/{chunk_id}``).

    The time is the time to answer: until the last byte of the response is handed to the server, not counting
    work the route does after that (``/query`` appends its trace once the response is sent)."""

    def __init__(self, app, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        answered: float | None = None

        async def send_status(message) -> None:
            nonlocal status, answered
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                answered = time.perf_counter()

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            name = getattr(route, "path", None) or "unmatched"
            self.metrics.observe(name, scope["method"], status, (answered or time.perf_counter()) - started)
