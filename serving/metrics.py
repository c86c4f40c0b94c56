"""Prometheus metrics of the serving app: requests and latencies per route, cache, index, traces, the process.

What describes the data is rendered for the caller: ``livemem_index_chunks`` counts only the chunks of access
levels the caller's role may read, so a scrape without a key learns nothing about hidden collections. Every other
number is the same whoever asks.

With several uvicorn workers (``--workers N``: each a process spawned by uvicorn's supervisor) a scrape reaches
one worker, so per-process counters would jump between workers' values and Prometheus would read resets. There
the metrics use prometheus_client's multiprocess mode: each worker writes its counters to memory-mapped files in
one directory per supervisor (``<index home>/cache/metrics/<supervisor pid>-<its start time>/``, or
``$PROMETHEUS_MULTIPROC_DIR`` when the operator sets it), and a scrape sums the files of every worker, those that
exited included, so totals only grow. Directories of supervisors that are gone are removed when a worker starts;
a worker that exits is marked dead (``mark_process_dead``), which drops its live gauges. The cache and trace
counters are copied into those files after every request. ``process_*`` metrics describe the process that
answered the scrape.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest, values
from prometheus_client import multiprocess as prom_multiprocess
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from livemem.usage.traces import SCRAPE_FLUSH_WAIT_S
from livemem.version.owners import process_alive, process_start_time

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


MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess_dir(index_dir: Path) -> Path | None:
    """The directory this worker shares with the other workers of its uvicorn supervisor, created (and those of
    supervisors that are gone removed); None in a single serving process (no supervisor: plain counters)."""
    if os.environ.get(MULTIPROC_ENV):
        path = Path(os.environ[MULTIPROC_ENV])
        path.mkdir(parents=True, exist_ok=True)
        return path
    parent = multiprocessing.parent_process()
    if parent is None or parent.pid is None:
        return None
    root = index_dir / "cache" / "metrics"
    root.mkdir(parents=True, exist_ok=True)
    for old in root.iterdir():  # directories of supervisors that ended: their counters began again with them
        pid, _, started = old.name.partition("-")
        if pid.isdigit() and not process_alive(int(pid), started or None):
            shutil.rmtree(old, ignore_errors=True)
    path = root / f"{parent.pid}-{process_start_time(parent.pid) or 0}"
    path.mkdir(exist_ok=True)
    return path


class Metrics:
    def __init__(self, state: ServingState) -> None:
        self.state = state
        self.directory = multiprocess_dir(Path(state.settings.index_dir))
        if self.directory is not None:
            os.environ[MULTIPROC_ENV] = str(self.directory)  # read by prometheus_client when metrics are made
            if not getattr(values.ValueClass, "_multiprocess", False):
                values.ValueClass = values.MultiProcessValue()
        # in multiprocess mode the metrics live in files, gathered at scrape time; else in this registry
        self.registry = CollectorRegistry()
        owned = self.registry if self.directory is None else None
        self.requests = Counter("livemem_http_requests", "HTTP requests", ["route", "method", "status"], registry=owned)
        self.latency = Histogram(
            "livemem_http_request_duration_seconds",
            "time to answer, per route",
            ["route", "method"],
            buckets=LATENCY_BUCKETS,
            registry=owned,
        )
        if self.directory is None:
            self.registry.register(_StateCollector(state))
        else:
            prom_multiprocess.MultiProcessCollector(self.registry, path=str(self.directory))
            self._shared = _SharedStateCounters(state)
        ProcessCollector(registry=self.registry)  # process_*: the process answering the scrape

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route, method).observe(seconds)
        if self.directory is not None:
            self._shared.sync()

    def render(self, access: frozenset[str]) -> bytes:
        """The text format for a caller whose role reads ``access``."""
        if self.directory is not None:
            self.state.traces.flush(wait_s=SCRAPE_FLUSH_WAIT_S)
            self._shared.sync()
        visible = CollectorRegistry()
        visible.register(_VisibleIndexCollector(self.state, access))
        return generate_latest(self.registry) + generate_latest(visible)

    def close(self) -> None:
        """At a worker's exit: its live gauges leave the shared files (its counters stay: totals never drop)."""
        if self.directory is not None:
            self._shared.sync()
            prom_multiprocess.mark_process_dead(os.getpid(), str(self.directory))


class _SharedStateCounters:
    """The state counters of ``_StateCollector`` kept in the multiprocess files: after each request the growth of
    each counter since the last copy is added, the gauges are set (live workers only)."""

    COUNTERS = (
        ("livemem_cache_hits", "query results answered from the cache", lambda s: s.cache.hits),
        ("livemem_cache_misses", "query results computed", lambda s: s.cache.misses),
        ("livemem_trace_events", "trace events written", lambda s: s.traces.written),
        ("livemem_trace_write_failures", "trace writes that failed", lambda s: s.traces.failures),
        ("livemem_trace_events_dropped", "trace events dropped: the queue was full", lambda s: s.traces.dropped),
        ("livemem_index_swaps", "switches to a newly published version", lambda s: s.reader.swaps),
    )

    def __init__(self, state: ServingState) -> None:
        self.state = state
        self.counters = [(Counter(name, text, registry=None), read) for name, text, read in self.COUNTERS]
        self.seen = [0] * len(self.counters)
        self.entries = Gauge(
            "livemem_cache_entries", "entries in the result caches of the live workers", registry=None,
            multiprocess_mode="livesum",
        )  # fmt: skip
        self.loaded = Gauge(
            "livemem_index_loaded_timestamp_seconds", "when the served version was loaded (latest of the workers)",
            registry=None, multiprocess_mode="livemax",
        )  # fmt: skip
        self.info = Gauge(
            "livemem_index_info", "the index version being served", ["version", "model"], registry=None,
            multiprocess_mode="livemax",
        )  # fmt: skip
        self.version: tuple[str, str] | None = None

    def sync(self) -> None:
        for i, (counter, read) in enumerate(self.counters):
            now = int(read(self.state))
            if now > self.seen[i]:
                counter.inc(now - self.seen[i])
                self.seen[i] = now
        self.entries.set(len(self.state.cache))
        snap = self.state.reader.loaded
        if snap is not None and (snap.version_id, snap.model_id) != self.version:
            if self.version is not None:
                self.info.labels(*self.version).set(0)
            self.version = (snap.version_id, snap.model_id)
            self.info.labels(*self.version).set(1)
            self.loaded.set(snap.loaded_at)


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
