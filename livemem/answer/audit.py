"""Audit records of /context and /chat: one structured JSONL line per call.

Written to ``<index home>/traces/audit-YYYY-MM-DD-<host>-<pid>.jsonl`` with the same safe append as the usage
traces (``livemem.usage.traces.TraceWriter``: one ``write`` under ``O_APPEND`` and an exclusive ``flock``). A
record is on disk before the answer it describes is sent (``write_through``), unless the file stays locked by
another holder for ``AUDIT_WAIT_S``: then it is queued like the usage traces (the process's trace thread appends
it when the file is free; flushed at shutdown and before a ``/metrics`` scrape), so an audit file locked elsewhere
delays an answer by at most that, never hangs it. The attention rollup reads only ``YYYY-MM-DD*.jsonl``, so audit
files never count as usage. A failed write is logged and counted and never fails the request. Audit files, like
traces, are created 0600 (the service's user only), and record bounded summaries of what the caller sent
(``livemem.usage.traces.bounded``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from livemem.usage.traces import QUERY_CHARS, TraceWriter, bounded, utc_timestamp

AUDIT_WAIT_S = 0.2  # the longest an answer waits for its audit file's lock (other writers hold it for µs)


class AuditWriter(TraceWriter):
    def path_for(self, day: str) -> Path:
        return self.directory / f"audit-{day}-{self.name or f'{self.host}-{os.getpid()}'}.jsonl"


def audit_record(
    *,
    event: str,
    trace_id: str,
    role: str,
    context: dict[str, Any],
    cache_hit: bool,
    latency_ms: dict[str, float],
    answer: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What a reviewer needs to reconstruct a call: route, sources, filters, scores, registry and web decisions."""
    route = context["route"]
    record = {
        "timestamp": utc_timestamp(),
        "event": event,
        "trace_id": trace_id,
        "role": role,
        "message": context["message"][:QUERY_CHARS],
        "thread_id": context.get("thread_id"),
        "index_version": context["index_version"],
        "intents": route["intents"],
        "rules": route["rules"],
        "response_class": route["response_class"],
        "reason": route["reason"],
        "filters": bounded(route["filters"]),
        "self_query": route["self_query"],
        "wv_scoped": route["wv_scoped"],
        "wv_reasons": route["wv_reasons"],
        "collections_queried": route["sources_queried"],
        "hidden_collections": context.get("hidden_collections", []),
        "scores": [
            {"chunk_id": p["chunk_id"], "collection": p["collection"], "score": p["score"], **p["scores"]}
            for p in context["unstructured"]
        ],
        "spatial": [{"entity_id": e["entity_id"], "score": e["score"]} for e in context["spatial"]],
        "registry_lookups": route["registry_lookups"],
        "registry_ids": [r["local_resource_id"] for r in context["registry"]],
        "web": route["web"],
        "prompt_chars": context["prompt"]["chars"],
        "cache_hit": cache_hit,
        "latency_ms": latency_ms,
    }
    if answer is not None:
        record["answer"] = {k: answer.get(k) for k in ("backend", "model", "fallback", "guardrail")} | {
            "citations": [c["id"] for c in answer.get("citations", [])]
        }
    return record
