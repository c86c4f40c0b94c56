"""Usage traces: append-only JSONL files the nightly attention rollup reads.

Each serving process appends to ``<index home>/traces/YYYY-MM-DD-<host>-<pid>.jsonl`` (UTC date). Every batch of
events (one request's) is written with a single ``write`` on a file opened with ``O_APPEND`` while holding an
exclusive ``flock`` on it, so several processes (or threads) sharing one file never lose or interleave lines.
Writing a trace never fails a query: errors are logged and counted, and the caller carries on.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def new_trace_id() -> str:
    return str(uuid.uuid4())


def utc_timestamp() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class TraceWriter:
    """Appends trace events to the day's file for this host and process (or to a shared ``name``)."""

    def __init__(self, directory: str | os.PathLike[str], name: str | None = None) -> None:
        self.directory = Path(directory)
        self.name = name
        self.host = socket.gethostname().replace("/", "_") or "host"
        self.written = 0
        self.failures = 0
        self._count_lock = threading.Lock()

    def path_for(self, day: str) -> Path:
        suffix = self.name or f"{self.host}-{os.getpid()}"
        return self.directory / f"{day}-{suffix}.jsonl"

    def write(self, events: Iterable[dict[str, Any]]) -> bool:
        """Append events as one block of lines; returns False (and logs) when the write failed."""
        lines = "".join(json.dumps(e, ensure_ascii=False, separators=(",", ":")) + "\n" for e in events)
        if not lines:
            return True
        data = lines.encode("utf-8")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.path_for(datetime.now(UTC).strftime("%Y-%m-%d"))
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)  # closing releases the lock
        except OSError as exc:
            with self._count_lock:
                self.failures += 1
            log.warning("could not write %d trace bytes to %s: %s", len(data), self.directory, exc)
            return False
        with self._count_lock:
            self.written += lines.count("\n")
        return True


TRACE_TABLE = "living_memory_traces"


class PostgresTraceWriter:
    """Appends trace events to a Postgres table instead of files, for many serving replicas on many machines.

    One row per event (``ts``, ``trace_id``, ``event`` as jsonb); a request's events go in one transaction, so
    they land together or not at all. Like the file writer, a failure is logged and counted, never raised.
    The nightly rollup reads the table when ``RAG_TRACE_DSN`` is set (``livemem.attention``).
    """

    def __init__(self, dsn: str, table: str = TRACE_TABLE) -> None:
        if not table.replace("_", "").isalnum():
            raise ValueError(f"trace table name {table!r} must be letters, digits and underscores")
        self.dsn = dsn
        self.table = table
        self.directory = f"postgres table {table}"
        self.written = 0
        self.failures = 0
        self._local = threading.local()
        self._count_lock = threading.Lock()

    def _connection(self):
        import psycopg

        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            conn = psycopg.connect(self.dsn, connect_timeout=5)
            ensure_trace_table(conn, self.table)
            self._local.conn = conn
        return conn

    def write(self, events: Iterable[dict[str, Any]]) -> bool:
        rows = [(e["timestamp"], e.get("trace_id"), json.dumps(e, ensure_ascii=False)) for e in events]
        if not rows:
            return True
        try:
            conn = self._connection()
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(f"INSERT INTO {self.table} (ts, trace_id, event) VALUES (%s, %s, %s)", rows)
        except Exception as exc:  # any database failure: count it, never fail the query
            self._local.conn = None
            with self._count_lock:
                self.failures += 1
            log.warning("could not write %d trace events to %s: %s", len(rows), self.directory, exc)
            return False
        with self._count_lock:
            self.written += len(rows)
        return True


def ensure_trace_table(conn: Any, table: str = TRACE_TABLE) -> None:
    """Create the trace table if missing. ``CREATE ... IF NOT EXISTS`` is not safe when several processes run it
    at once, so creation is serialised with a transaction-scoped advisory lock."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"living-memory:{table}"])
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {table} (id BIGSERIAL PRIMARY KEY, ts TIMESTAMPTZ NOT NULL, "
            f"trace_id TEXT, event JSONB NOT NULL)"
        )
        cur.execute(f"CREATE INDEX IF NOT EXISTS {table}_ts ON {table} (ts)")


def trace_writer(directory: str | os.PathLike[str], dsn: str | None = None) -> TraceWriter | PostgresTraceWriter:
    """Files under ``directory``, or the Postgres table when a DSN is configured (``RAG_TRACE_DSN``)."""
    return PostgresTraceWriter(dsn) if dsn else TraceWriter(directory)


def retrieval_events(
    *,
    trace_id: str,
    query: str,
    chunk_ids: list[str],
    scores: list[float],
    role: str,
    breath_phase: str | None,
    index_version: str,
    mode: str,
    return_: str,
    filters: dict[str, Any],
    collections: list[str],
    cache_hit: bool,
) -> list[dict[str, Any]]:
    """One ``retrieval`` event per returned chunk (one with ``chunk_id`` null when nothing was returned)."""
    timestamp = utc_timestamp()
    common = {
        "timestamp": timestamp,
        "event": "retrieval",
        "trace_id": trace_id,
        "query": query,
        "breath_phase": breath_phase,
        "agent": "serving",
        "role": role,
        "useful": None,
        "index_version": index_version,
    }
    if not chunk_ids:
        return [{**common, "chunk_id": None, "context": _context([], mode, return_, filters, collections, cache_hit)}]
    return [
        {
            **common,
            "chunk_id": cid,
            "rank": rank,
            "score": score,
            "context": _context([c for c in chunk_ids if c != cid], mode, return_, filters, collections, cache_hit),
        }
        for rank, (cid, score) in enumerate(zip(chunk_ids, scores, strict=True), start=1)
    ]


def feedback_events(
    *, trace_id: str, chunk_ids: list[str], useful: bool, role: str, breath_phase: str | None, index_version: str,
    comment: str | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """One ``feedback`` event per chunk judged (one with ``chunk_id`` null for the whole answer)."""
    common = {
        "timestamp": utc_timestamp(),
        "event": "feedback",
        "trace_id": trace_id,
        "query": None,
        "breath_phase": breath_phase,
        "agent": "serving",
        "role": role,
        "useful": useful,
        "index_version": index_version,
    }
    context: dict[str, Any] = {"related_chunks": list(chunk_ids)}
    if comment:
        context["comment"] = comment
    return [{**common, "chunk_id": cid, "context": context} for cid in (chunk_ids or [None])]


def _context(
    related: list[str], mode: str, return_: str, filters: dict[str, Any], collections: list[str], cache_hit: bool
) -> dict[str, Any]:
    return {
        "related_chunks": related,
        "mode": mode,
        "return": return_,
        "filters": filters,
        "collections": collections,
        "cache_hit": cache_hit,
    }
