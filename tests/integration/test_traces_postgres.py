"""Traces in Postgres instead of files (``RAG_TRACE_DSN``): many writer processes, the rollup reads the table.

Runs against a real PostgreSQL server (``LIVEMEM_TEST_PG_DSN``, which ``.ci/run`` sets up); skipped, with the
reason shown, when none is reachable.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import uuid
from datetime import UTC, datetime
from functools import partial

import pytest
from fastapi.testclient import TestClient
from support.locks import locks_held, postgres_table_locked
from support.serving import build_and_publish, make_workspace

from livemem.settings import TraceSettings
from livemem.sources.breath import Breath
from livemem.usage.attention import AttentionConfig, rollup_day
from livemem.usage.traces import TRACE_TABLE, PostgresTraceWriter, retrieval_events
from livemem.version.store import IndexHome

psycopg = pytest.importorskip("psycopg")
DSN = os.environ.get("LIVEMEM_TEST_PG_DSN", "postgresql://livemem:livemem@127.0.0.1:5432/livemem_test")


@pytest.fixture
def trace_table():
    try:
        conn = psycopg.connect(DSN, connect_timeout=3, autocommit=True)
    except psycopg.Error as exc:
        pytest.skip(f"no PostgreSQL server reachable at LIVEMEM_TEST_PG_DSN ({exc.__class__.__name__}: {exc})")
    conn.execute(f"DROP TABLE IF EXISTS {TRACE_TABLE}")
    yield conn
    conn.execute(f"DROP TABLE IF EXISTS {TRACE_TABLE}")
    conn.close()


def _write_many(worker: int, requests: int) -> None:
    writer = PostgresTraceWriter(DSN)
    for n in range(requests):
        events = retrieval_events(
            trace_id=str(uuid.uuid4()), query=f"q {worker}-{n}", chunk_ids=[str(uuid.uuid4()) for _ in range(3)],
            scores=[0.9, 0.8, 0.7], role="public", breath_phase="Δ3", index_version="v", mode="hybrid",
            return_="chunks", filters={}, collections=["docs"], cache_hit=False,
        )  # fmt: skip
        assert writer.write(events)


def test_writer_processes_lose_no_event(trace_table) -> None:
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_write_many, args=(w, 150)) for w in range(4)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(timeout=120)
        assert p.exitcode == 0
    rows = trace_table.execute(f"SELECT trace_id, event FROM {TRACE_TABLE}").fetchall()
    assert len(rows) == 4 * 150 * 3
    per_trace: dict[str, int] = {}
    for trace_id, event in rows:
        assert event["trace_id"] == trace_id and event["event"] == "retrieval"
        per_trace[trace_id] = per_trace.get(trace_id, 0) + 1
    assert set(per_trace.values()) == {3}  # each request's events landed together


def test_an_unreachable_database_never_fails_the_caller() -> None:
    writer = PostgresTraceWriter("postgresql://nobody:nothing@127.0.0.1:1/none")
    events = retrieval_events(
        trace_id=str(uuid.uuid4()), query="q", chunk_ids=[], scores=[], role="public", breath_phase=None,
        index_version="v", mode="hybrid", return_="chunks", filters={}, collections=[], cache_hit=False,
    )  # fmt: skip
    assert writer.write(events) is False and writer.failures == 1


def test_serving_writes_to_postgres_and_the_rollup_reads_it(trace_table, tmp_path, embedder) -> None:
    from serving.app import create_app
    from serving.settings import Settings

    home = IndexHome(tmp_path / "rag_index")
    build_and_publish(make_workspace(tmp_path), home, embedder)
    # two callers (one verdict per caller, chunk and day counts; a caller's repeat is one line: issue 33)
    keys = {"caller-one": "public", "caller-two": "public"}
    settings = Settings(index_dir=home.root, warm_up=False, trace_dsn=DSN, api_keys=keys)
    with TestClient(create_app(settings, embedder)) as client:
        for key in keys:
            headers = {"X-API-Key": key}
            body = {"query": "SNAP food assistance", "top_k": 2, "mode": "sparse"}
            data = client.post("/query", json=body, headers=headers).json()
            top = data["results"][0]["chunk_id"]
            verdict = {"trace_id": data["trace_id"], "chunk_ids": [top], "useful": True}
            assert client.post("/feedback", json=verdict, headers=headers).status_code == 200
    assert not list(home.traces.glob("*.jsonl"))  # nothing went to files
    stored = trace_table.execute(f"SELECT count(*) FROM {TRACE_TABLE}").fetchone()[0]
    assert stored == 6
    trace_table.execute(
        f"INSERT INTO {TRACE_TABLE} (ts, trace_id, event) VALUES (now(), 't', %s)",
        [json.dumps({"timestamp": "not a time", "event": "retrieval", "trace_id": "t", "chunk_id": None})],
    )
    traces = TraceSettings.defaults(dsn=DSN)  # RAG_TRACE_DSN, as the rollup asset's trace resource passes it
    result = rollup_day(home, datetime.now(UTC).date(), AttentionConfig(), Breath("Δ3", "normal"), traces=traces)
    assert result.events == 6 and result.malformed == 1 and result.files == [f"postgres:{TRACE_TABLE}"]
    assert result.staged
    home.publish(result.version_id, result.base_version, 5)
    top = data["results"][0]["chunk_id"]
    with TestClient(create_app(Settings(index_dir=home.root, warm_up=False), embedder)) as client:
        assert client.get(f"/chunks/{top}").json()["attention_score"] == pytest.approx(2.0)  # confirmed twice


def test_a_locked_table_fails_a_write_after_the_statement_timeout_instead_of_blocking(trace_table) -> None:
    """A trace table locked elsewhere (a migration, a stuck session) must not block the writer for good: the write
    fails after the connection's ``statement_timeout`` (counted, as a failed write), and the next one succeeds."""

    def events(query: str) -> list[dict]:
        return retrieval_events(
            trace_id=str(uuid.uuid4()), query=query, chunk_ids=[str(uuid.uuid4())], scores=[0.5], role="public",
            breath_phase=None, index_version="v", mode="hybrid", return_="chunks", filters={}, collections=["docs"],
            cache_hit=False,
        )  # fmt: skip

    writer = PostgresTraceWriter(DSN)
    writer.statement_timeout_s = 0.5
    assert writer.write(events("before"))  # creates the table
    with locks_held(postgres_table_locked(DSN, TRACE_TABLE)) as (answer, _):  # a write that waits fails the test
        assert answer(partial(writer.write, events("locked"))) is False
    assert writer.failures == 1 and writer.write(events("after"))
    queries = [row[0]["query"] for row in trace_table.execute(f"SELECT event FROM {TRACE_TABLE} ORDER BY id")]
    assert queries == ["before", "after"]
