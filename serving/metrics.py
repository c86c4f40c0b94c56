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
a worker that exits is marked dead (``mark_process_dead``), which drops its live gauges.

The numbers a process keeps itself (the result cache's and trace writer's here, the answer cache's, audit's and
warm-up's of ``serving.services.context``, the ``process_*`` metrics) are collectors (``Metrics.add_collector``):
read at scrape time in a single process; with several workers copied into those files (``_Mirror``: a counter's
growth since the last copy, a gauge's value) after every request (``process_*``: at most once a second) and before
every scrape. Across workers a gauge is the sum over live workers (``livesum``) unless ``gauge_modes`` says
otherwise; ``process_cpu_seconds_total`` is the CPU time of every worker of the server, exited ones included;
``process_start_time_seconds`` the oldest live worker's start; a ratio (``livemem_answer_cache_hit_ratio``) is
computed at scrape time from the summed counters (``ratios``).
"""

from __future__ import annotations

import math
import multiprocessing
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest, values
from prometheus_client import multiprocess as prom_multiprocess
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from livemem.usage.traces import SCRAPE_FLUSH_WAIT_S
from livemem.version.owners import process_alive, process_start_time
from serving.asgi import ResponseWatch

if TYPE_CHECKING:
    from serving.state import ServingState

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
PROCESS_SYNC_S = 1.0  # with several workers: a worker copies its process_* numbers at most this often per request
# process_* gauges across workers (the others of ProcessCollector: summed over live workers)
PROCESS_GAUGE_MODES = {"process_start_time_seconds": "livemin", "process_max_fds": "livemax"}


class _StateCollector:
    """Reads the cache, reader and trace counters at scrape time (they are the single source of truth)."""

    def __init__(self, state: ServingState) -> None:
        self.state = state

    def flush(self) -> None:
        # queued trace events (livemem.usage.traces) are written, so their counters are exact, unless the trace
        # file is locked elsewhere: then the scrape answers with the counts so far instead of waiting
        self.state.traces.flush(wait_s=SCRAPE_FLUSH_WAIT_S)

    def collect(self):
        self.flush()
        yield from self.families()

    def families(self):
        cache, reader, traces = self.state.cache, self.state.reader, self.state.traces
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


STATE_GAUGE_MODES = {"livemem_index_info": "livemax", "livemem_index_loaded_timestamp_seconds": "livemax"}


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
        self._mirrors: list[_Mirror] = []
        self._ratios: dict[str, tuple[str, str, str]] = {}
        if self.directory is not None:
            self.registry.register(_Merged(str(self.directory), self._ratios))
        self.add_collector(_StateCollector(state), STATE_GAUGE_MODES)
        # process_*: the process answering the scrape, or with several workers all of them (see the module's doc)
        self.add_collector(ProcessCollector(registry=None), PROCESS_GAUGE_MODES, interval_s=PROCESS_SYNC_S)

    def add_collector(
        self,
        collector,
        gauge_modes: dict[str, str] | None = None,
        *,
        ratios: dict[str, tuple[str, str, str]] | None = None,
        interval_s: float = 0.0,
    ) -> None:
        """Expose what ``collector`` counts in this process (its ``collect``, or ``flush`` then ``families``).

        With several workers its samples are copied into the shared files instead (after each request, at most
        every ``interval_s``, and before each scrape); ``gauge_modes``: how a gauge is combined across workers
        (prometheus_client's ``multiprocess_mode``, default ``livesum``); ``ratios``: gauges computed at scrape
        time as ``hits / (hits + misses)`` of two counters summed over workers, ``{name: (help, hits, misses)}``."""
        if self.directory is None:
            self.registry.register(collector)
            return
        skipped = set(ratios or ())
        self._ratios.update(ratios or {})
        self._mirrors.append(_Mirror(collector, gauge_modes or {}, skipped, interval_s))

    def prepare(self) -> None:
        """The collectors' first copy into the shared files now (with several workers: the files are made on first
        use), at startup rather than after a worker's first request."""
        for mirror in self._mirrors:
            mirror.sync(force=True)

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route, method).observe(seconds)
        for mirror in self._mirrors:
            mirror.sync()

    def render(self, access: frozenset[str]) -> bytes:
        """The text format for a caller whose role reads ``access``."""
        for mirror in self._mirrors:
            mirror.flush()
            mirror.sync(force=True)
        visible = CollectorRegistry()
        visible.register(_VisibleIndexCollector(self.state, access))
        return generate_latest(self.registry) + generate_latest(visible)

    def close(self) -> None:
        """At a worker's exit: its live gauges leave the shared files (its counters stay: totals never drop)."""
        if self.directory is not None:
            for mirror in self._mirrors:
                mirror.sync(force=True)
            prom_multiprocess.mark_process_dead(os.getpid(), str(self.directory))


class _Mirror:
    """A collector's samples kept in the multiprocess files: the growth of each counter (per label set) since the
    last copy is added, each gauge set (a label set that is gone is set to 0)."""

    def __init__(self, collector, gauge_modes: dict[str, str], skipped: set[str], interval_s: float) -> None:
        self.collector = collector
        self.gauge_modes = gauge_modes
        self.skipped = skipped
        self.interval_s = interval_s
        self.metrics: dict[str, Counter | Gauge] = {}
        self.copied: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self.gauged: dict[str, set[tuple[str, ...]]] = {}
        self.last = -math.inf
        self.lock = threading.Lock()  # requests (the event loop) and scrapes (a thread) copy

    def flush(self) -> None:
        flush = getattr(self.collector, "flush", None)
        if flush is not None:
            flush()

    def sync(self, force: bool = False) -> None:
        if not force and time.monotonic() - self.last < self.interval_s:
            return
        with self.lock:
            self.last = time.monotonic()
            read = getattr(self.collector, "families", None)
            for family in read() if read is not None else self.collector.collect():
                if family.name in self.skipped:
                    continue
                if family.type == "counter":
                    self._count(family)
                elif family.type == "gauge":
                    self._gauge(family)

    def _metric(self, family, kind: type, labelnames: list[str], **extra) -> Counter | Gauge:
        metric = self.metrics.get(family.name)
        if metric is None:
            metric = kind(family.name, family.documentation, labelnames, registry=None, **extra)
            self.metrics[family.name] = metric
        return metric

    def _count(self, family) -> None:
        for sample in family.samples:
            if not sample.name.endswith("_total"):  # _created
                continue
            labels = tuple(sorted(sample.labels.items()))
            metric = self._metric(family, Counter, [k for k, _ in labels])
            key = (family.name, labels)
            before = self.copied.get(key, 0.0)
            if sample.value > before:
                (metric.labels(*[v for _, v in labels]) if labels else metric).inc(sample.value - before)
            self.copied[key] = sample.value  # lower: the source began again (its growth from there is copied)

    def _gauge(self, family) -> None:
        mode = self.gauge_modes.get(family.name, "livesum")
        now: set[tuple[str, ...]] = set()
        names: list[str] | None = None
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            names = [k for k, _ in labels]
            metric = cast(Gauge, self._metric(family, Gauge, names, multiprocess_mode=mode))
            key = tuple(v for _, v in labels)
            (metric.labels(*key) if key else metric).set(sample.value)
            now.add(key)
        gauge = cast("Gauge | None", self.metrics.get(family.name))  # a gauge family's metric is a Gauge
        for gone in self.gauged.get(family.name, set()) - now:
            if gauge is not None:
                (gauge.labels(*gone) if gone else gauge).set(0)
        self.gauged[family.name] = now


class _Merged:
    """The shared files summed (prometheus_client's ``MultiProcessCollector``), and the ratios of summed counters."""

    def __init__(self, path: str, ratios: dict[str, tuple[str, str, str]]) -> None:
        self.path = path
        self.ratios = ratios

    def collect(self) -> Iterator[Metric]:
        families = list(prom_multiprocess.MultiProcessCollector(None, path=self.path).collect())
        yield from families
        totals: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        for family in families:
            totals[family.name] = {
                tuple(sorted(s.labels.items())): s.value for s in family.samples if s.name.endswith("_total")
            }
        for name, (text, hits_name, misses_name) in self.ratios.items():
            hits, misses = totals.get(hits_name, {}), totals.get(misses_name, {})
            keys = sorted(set(hits) | set(misses))
            labelnames = [k for k, _ in keys[0]] if keys else []
            ratio = GaugeMetricFamily(name, text, labels=labelnames)
            for key in keys:
                h, m = hits.get(key, 0.0), misses.get(key, 0.0)
                ratio.add_metric([v for _, v in key], h / (h + m) if h + m else 0.0)
            yield ratio


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
        watch = ResponseWatch(send)
        try:
            await self.app(scope, receive, watch.send)
        finally:
            route = scope.get("route")
            name = getattr(route, "path", None) or "unmatched"
            self.metrics.observe(name, scope["method"], watch.status, watch.seconds)
