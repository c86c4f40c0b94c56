"""What callers can make the service write (issue 33): a request's trace is bounded and linear in its results, a
repeated answer is one line, a full disk never loses an acknowledged feedback (real uvicorn, a real file-size
limit), one anonymous caller's verdicts on a chunk count once a day, and one API key keeps memory for a bounded
number of users."""

from __future__ import annotations

import json
import resource
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from support.context import INTERNAL_KEY, example_index
from support.servers import uvicorn

from livemem import personal
from livemem.usage.attention import compute_signals, read_day
from serving.app import create_app
from serving.settings import Settings

LONG_QUERY = ("heating help food assistance Medicaid renewal Fayette County Oak Hill office " * 60)[:3_999]
MEMORY_KEYS = {"memory-key-0123456789": "public", "other-key-0123456789": "public"}


@pytest.fixture(scope="module")
def home(tmp_path_factory, embedder):
    return example_index(tmp_path_factory)


@pytest.fixture
def traces(tmp_path) -> Path:
    return tmp_path / "traces"


@pytest.fixture
def client(home, embedder, traces):
    keys = {INTERNAL_KEY: "internal", **MEMORY_KEYS}
    with TestClient(create_app(Settings(index_dir=home.root, trace_dir=traces, warm_up=False, api_keys=keys),
                               embedder)) as c:  # fmt: skip
        yield c


def size(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.glob("2*.jsonl"))


def signals(directory: Path) -> dict:
    today = datetime.now(UTC).date()
    return compute_signals(read_day(directory, today, UTC), today, "UTC")["chunk_usage"]


def test_a_long_top_200_query_writes_a_bounded_trace_repeats_a_line_each_and_its_feedback_counts(client, traces):
    """Issue 33, defect 4: this request wrote 130 events and 1.37 MB, and 100 cached repeats 24 MB in 0.2 s."""
    body = {"query": LONG_QUERY, "top_k": 200}
    first = client.post("/query", json=body).json()
    ids = [r["chunk_id"] for r in first["results"]]
    assert len(ids) >= 100 and len(first["trace_id"]) > 1000  # the signed id carries a tag per chunk
    client.app.state.serving.traces.flush()
    one = size(traces)
    assert one < 64 * 1024, one
    text = next(traces.glob("2*.jsonl")).read_text()
    assert first["trace_id"] not in text and text.count(LONG_QUERY) == 1
    repeats = [client.post("/query", json=body).json() for _ in range(100)]
    assert all(r["cached"] and [x["chunk_id"] for x in r["results"]] == ids for r in repeats)
    client.app.state.serving.traces.flush()
    assert size(traces) - one < 100 * 512, size(traces) - one  # a line each, not 100 full traces
    # Feedback on the last repeat still counts, for one chunk and for the whole answer.
    last = repeats[-1]["trace_id"]
    assert client.post("/feedback", json={"trace_id": last, "chunk_ids": [ids[5]], "useful": True}).status_code == 200
    with TestClient(client.app, headers={"X-API-Key": INTERNAL_KEY}) as internal:  # another caller
        again = internal.post("/query", json=body).json()
        whole = internal.post("/feedback", json={"trace_id": again["trace_id"], "useful": True})
        assert whole.status_code == 200
    usage = signals(traces)
    assert usage[ids[5]]["useful_evidence"] == pytest.approx(1 + 1 / len(again["results"]))
    assert usage[ids[0]]["retrievals"] == 102


def test_fifty_anonymous_query_and_feedback_pairs_move_attention_as_one_verdict(client, traces):
    """Issue 33, weak: every anonymous /query mints a signed trace, so N query + feedback pairs were N verdicts."""
    chosen = None
    for n in range(50):
        data = client.post("/query", json={"query": f"SNAP food assistance Oak Hill {n}", "top_k": 5}).json()
        ids = [r["chunk_id"] for r in data["results"]]
        chosen = chosen if chosen in ids else ids[0]
        response = client.post("/feedback", json={"trace_id": data["trace_id"], "chunk_ids": [chosen], "useful": True})
        assert response.status_code == 200
    assert signals(traces)[chosen]["useful_evidence"] == 1.0
    events = [json.loads(x) for f in traces.glob("2*.jsonl") for x in f.read_text().splitlines()]
    tags = {e["caller"] for e in events if e["event"] == "feedback"}
    assert len(tags) == 1 and "testclient" not in next(iter(tags))  # a keyed tag, not the address


def test_feedback_on_a_full_disk_is_a_503_and_the_next_after_space_is_freed_counts(home, tmp_path, monkeypatch):
    """Issue 33, defect 7, on a real uvicorn process: its file-size limit (RLIMIT_FSIZE, EFBIG as a full disk gives
    ENOSPC) is lowered to just past the trace file while a feedback is written, then raised ("space is freed")."""
    traces = tmp_path / "traces"
    monkeypatch.setenv("RAG_TRACE_DIR", str(traces))
    with uvicorn(home) as url, httpx.Client(base_url=url, timeout=30) as http:
        data = http.post("/query", json={"query": "heating bill help Fayette County", "top_k": 5}).json()
        ids = [r["chunk_id"] for r in data["results"]]

        def judge(chunk: str) -> httpx.Response:
            return http.post("/feedback", json={"trace_id": data["trace_id"], "chunk_ids": [chunk], "useful": True})

        assert judge(ids[0]).status_code == 200  # the queued query events and this verdict are on disk now
        (path,) = traces.glob("2*.jsonl")
        pid = int(path.stem.rsplit("-", 1)[1])
        full = path.read_bytes()
        _, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (len(full) + 100, hard))  # the disk fills 100 bytes in
        try:
            refused = judge(ids[1])
        finally:
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (hard, hard))
        assert refused.status_code == 503 and refused.headers["retry-after"] == "5", refused.text
        assert path.read_bytes() == full  # nothing torn left behind
        retried = judge(ids[1])
        assert retried.status_code == 200
        assert judge(ids[2]).status_code == 200
    lines = path.read_text().splitlines()
    assert all(json.loads(line) for line in lines)
    usage = signals(traces)
    assert [usage[c]["useful_evidence"] for c in ids[:3]] == [1.0, 1.0, 1.0]


def test_one_api_key_keeps_memory_for_a_bounded_number_of_users(client, tmp_path, monkeypatch):
    """Issue 33, weak: one key could create unlimited personal-memory users (a user_id each)."""
    state = client.app.state.serving  # LIVEMEM_PERSONAL_MAX_USERS_PER_KEY=3, as the entry point passes it down
    monkeypatch.setattr(state, "personal", personal.PersonalStore(tmp_path / "personal", None, max_users=3))
    key, other = ({"X-API-Key": k} for k in MEMORY_KEYS)

    def card(user: str | None, headers=key) -> httpx.Response:
        return client.post("/memory", json={"text": f"a note of {user}", "user_id": user}, headers=headers)

    assert [card(u).status_code for u in (None, "u1", "u2")] == [201, 201, 201]
    refused = card("u3")
    assert refused.status_code == 403 and "LIVEMEM_PERSONAL_MAX_USERS_PER_KEY" in refused.json()["detail"]
    assert card("u1").status_code == 201  # an existing user keeps writing
    data = client.post("/query", json={"query": "SNAP", "top_k": 2}, headers=key).json()
    vote = {"trace_id": data["trace_id"], "chunk_ids": [data["results"][0]["chunk_id"]], "useful": True}
    assert client.post("/feedback", json={**vote, "personal": True, "user_id": "u4"}, headers=key).status_code == 403
    remember = {"message": "SNAP office in Fayette County", "remember": True, "user_id": "u5"}
    assert client.post("/context", json=remember, headers=key).status_code == 403
    assert card("u3", other).status_code == 201  # another key has its own users
    assert client.delete("/memory", params={"user_id": "u2"}, headers=key).status_code == 200
    assert card("u3").status_code == 201  # a user deleted whole frees its place at once
    listed = client.get("/memory", params={"user_id": "u6"}, headers=key)
    assert listed.status_code == 200 and listed.json()["items"] == []  # reading an unknown user creates nothing
