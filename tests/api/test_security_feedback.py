"""/feedback counts only for a trace this service issued, to the caller's role, for chunks that trace returned;
trace and audit files are private to the service's user and hold bounded summaries of what callers sent."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from support.serving import (
    API_KEYS,
    INTERNAL_KEY,
    answered_while_trace_file_locked,
    build_and_publish,
    make_workspace,
)

from livemem.usage.traces import (
    TRACE_SECRET_ENV,
    TRACE_SECRET_FILE,
    TraceSigner,
    TraceWriter,
    retrieval_events,
    trace_key,
)
from livemem.version.store import IndexHome
from serving.app import create_app
from serving.settings import Settings

INTERNAL = {"X-API-Key": INTERNAL_KEY}


@pytest.fixture(scope="module")
def home(tmp_path_factory, embedder) -> IndexHome:
    root = tmp_path_factory.mktemp("feedback")
    home = IndexHome(root / "rag_index")
    build_and_publish(make_workspace(root), home, embedder)
    return home


def app_for(home: IndexHome, embedder, **settings) -> TestClient:
    base = {"index_dir": home.root, "api_keys": API_KEYS, "warm_up": False, "cache_size": 0}
    return TestClient(create_app(Settings(**{**base, **settings}), embedder))


@pytest.fixture(scope="module")
def client(home, embedder):
    with app_for(home, embedder) as c:
        yield c


def events(trace_dir: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(trace_dir.glob("2*.jsonl")) for line in f.read_text().splitlines()]


def feedback_events(trace_dir: Path) -> list[dict]:
    return [e for e in events(trace_dir) if e["event"] == "feedback"]


def playbook_chunk(client: TestClient) -> tuple[str, str]:
    """(trace id, chunk id) of the internal playbook, as the internal role retrieves it."""
    data = client.post("/query", json={"query": "zebra protocol escalation", "top_k": 3}, headers=INTERNAL).json()
    chunk = next(r["chunk_id"] for r in data["results"] if r["collection"] == "internal_playbooks")
    return data["trace_id"], chunk


def test_feedback_on_a_real_trace_is_recorded_against_its_version(client, home):
    data = client.post("/query", json={"query": "Beckley LIHEAP heating help", "top_k": 2}).json()
    ids = [r["chunk_id"] for r in data["results"]]
    response = client.post("/feedback", json={"trace_id": data["trace_id"], "chunk_ids": ids, "useful": True})
    assert response.status_code == 200 and response.json() == {"trace_id": data["trace_id"], "recorded": 2}
    mine = [e for e in feedback_events(home.traces) if e["trace_id"] == trace_key(data["trace_id"])]
    assert sorted(e["chunk_id"] for e in mine) == sorted(ids)
    assert {e["index_version"] for e in mine} == {data["index_version"]} and {e["role"] for e in mine} == {"public"}
    whole = client.post("/feedback", json={"trace_id": data["trace_id"], "useful": False})
    assert whole.status_code == 200 and whole.json()["recorded"] == 1


def test_forged_foreign_and_widened_feedback_never_reaches_the_traces(client, home):
    """The attack of issue 12: anonymous calls pushing an internal chunk's attention. Every one is a 4xx and
    none is written where the attention rollup reads."""
    internal_trace, playbook = playbook_chunk(client)
    public = client.post("/query", json={"query": "SNAP food assistance", "top_k": 2}).json()
    before = feedback_events(home.traces)
    forged = TraceSigner(b"not the service's secret, 32 bytes").issue(
        role="public", index_version=public["index_version"], chunk_ids=[playbook]
    )
    uuid_only = public["trace_id"].split(".")[0]
    tampered = public["trace_id"][:-4] + ("AAAA" if not public["trace_id"].endswith("AAAA") else "BBBB")
    attempts = [
        ({"trace_id": forged, "chunk_ids": [playbook], "useful": True}, {}, 404),  # signed with another key
        ({"trace_id": tampered, "chunk_ids": [playbook], "useful": True}, {}, 404),  # signature altered
        ({"trace_id": internal_trace, "chunk_ids": [playbook], "useful": True}, {}, 404),  # another role's trace
        ({"trace_id": internal_trace, "useful": True}, {}, 404),  # ... even for the whole answer
        ({"trace_id": public["trace_id"], "chunk_ids": [playbook], "useful": True}, {}, 400),  # chunk not returned
        ({"trace_id": public["trace_id"], "chunk_ids": [playbook], "useful": True}, INTERNAL, 404),  # wrong role
        ({"trace_id": uuid_only, "chunk_ids": [playbook], "useful": True}, {}, 422),  # not a trace id at all
    ]
    for _ in range(5):
        for body, headers, status in attempts:
            response = client.post("/feedback", json=body, headers=headers)
            assert response.status_code == status, (body, response.text)
    assert feedback_events(home.traces) == before
    assert all(e["chunk_id"] != playbook for e in feedback_events(home.traces))
    # The caller that was given the playbook may judge it.
    ok = client.post("/feedback", json={"trace_id": internal_trace, "chunk_ids": [playbook], "useful": True},
                     headers=INTERNAL)  # fmt: skip
    assert ok.status_code == 200


def test_a_trace_from_one_worker_is_accepted_by_another(home, embedder, tmp_path, monkeypatch):
    """No per-process memory: two apps (as two uvicorn workers) share the secret generated once, 0600, under the
    trace directory; replicas with separate trace directories share RAG_TRACE_SECRET."""
    monkeypatch.delenv(TRACE_SECRET_ENV, raising=False)
    shared = tmp_path / "shared-traces"
    with app_for(home, embedder, trace_dir=shared) as first, app_for(home, embedder, trace_dir=shared) as second:
        data = first.post("/query", json={"query": "Medicaid renewal", "top_k": 1}).json()
        chunk = data["results"][0]["chunk_id"]
        body = {"trace_id": data["trace_id"], "chunk_ids": [chunk], "useful": True}
        assert second.post("/feedback", json=body).status_code == 200
    assert stat.S_IMODE((shared / TRACE_SECRET_FILE).stat().st_mode) == 0o600
    secret = "one secret for every replica of this deployment"  # RAG_TRACE_SECRET, as the app's settings read it
    with (
        app_for(home, embedder, trace_dir=tmp_path / "replica-a", trace_secret=secret) as a,
        app_for(home, embedder, trace_dir=tmp_path / "replica-b", trace_secret=secret) as b,
    ):
        data = a.post("/query", json={"query": "Medicaid renewal", "top_k": 1}).json()
        body = {"trace_id": data["trace_id"], "chunk_ids": [data["results"][0]["chunk_id"]], "useful": True}
        assert b.post("/feedback", json=body).status_code == 200
    with app_for(home, embedder, trace_dir=shared) as other_secret:  # the file's secret, not the replicas'
        assert other_secret.post("/feedback", json=body).status_code == 404


def test_context_and_chat_trace_ids_are_accepted_for_their_passages(client, home):
    for path in ("/context", "/chat"):
        body = client.post(path, json={"message": "SNAP office in Fayette County"}).json()
        evidence = body if path == "/context" else body["evidence"]
        chunks = [p["chunk_id"] for p in evidence["unstructured"]]
        assert chunks, body
        response = client.post("/feedback", json={"trace_id": body["trace_id"], "chunk_ids": chunks, "useful": True})
        assert response.status_code == 200, response.text
        _, playbook = playbook_chunk(client)
        widened = {"trace_id": body["trace_id"], "chunk_ids": [playbook], "useful": True}
        assert client.post("/feedback", json=widened).status_code == 400


def test_feedback_on_a_locked_trace_file_is_a_503_and_a_retry_records_it_once(client, home):
    """/feedback says what it recorded, so it writes before answering, but waits for a trace file locked elsewhere
    only so long (``FEEDBACK_WAIT_S``): then 503 and nothing written, and the client's retry records it once."""
    data = client.post("/query", json={"query": "Beckley LIHEAP heating help", "top_k": 2}).json()
    ids = [r["chunk_id"] for r in data["results"]]
    body = {"trace_id": data["trace_id"], "chunk_ids": ids, "useful": True, "comment": "locked-file retry"}
    traces = client.app.state.serving.traces
    refused, _ = answered_while_trace_file_locked([traces], lambda: client.post("/feedback", json=body))
    assert refused.status_code == 503 and "try again" in refused.json()["detail"], refused.text
    retried = client.post("/feedback", json=body)
    assert retried.status_code == 200 and retried.json()["recorded"] == 2, retried.text
    mine = [e for e in feedback_events(home.traces) if e["trace_id"] == trace_key(data["trace_id"])]
    assert sorted(e["chunk_id"] for e in mine) == sorted(ids)  # once each: the refused call wrote nothing


def test_trace_and_audit_files_are_private_to_the_service_user(client, home):
    client.post("/query", json={"query": "SNAP"})
    client.post("/context", json={"message": "SNAP office in Fayette County"})
    client.app.state.serving.traces.flush()  # both queue their traces (livemem.usage.traces.submit)
    written = sorted(home.traces.glob("*.jsonl"))
    assert any(f.name.startswith("audit-") for f in written) and any(f.name.startswith("2") for f in written)
    for f in written:
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f.name


def test_a_huge_filter_list_is_summarised_once_not_repeated_per_event(tmp_path):
    """Issue 12 measured 127 MB of traces from one request with a 1 MB filters list and top_k 200."""
    sources = [f"source-{i:06d}" for i in range(60_000)]  # about 1 MB of JSON
    chunk_ids = [f"00000000-0000-4000-8000-{i:012d}" for i in range(200)]
    writer = TraceWriter(tmp_path)
    batch = retrieval_events(
        trace_id="t", query="q" * 100_000, chunk_ids=chunk_ids, scores=[1.0] * 200, role="public",
        breath_phase=None, index_version="v", mode="hybrid", return_="chunks", filters={"source": sources},
        collections=["docs"], cache_hit=False,
    )  # fmt: skip
    assert writer.write(batch)
    size = sum(f.stat().st_size for f in tmp_path.glob("*.jsonl"))
    assert size < 3_000_000, size  # the related chunks of 200 results, not 200 copies of 1 MB
    first = json.loads(next(tmp_path.glob("*.jsonl")).read_text().splitlines()[0])
    summary = first["context"]["filters"]["source"]
    assert summary["count"] == 60_000 and summary["first"] == sources[:5] and len(summary["sha256"]) == 64
    assert len(first["query"]) <= 4000
