"""For the public role, hidden collections leave no trace: /context answers a question naming one exactly as one
naming a collection that does not exist, BM25 scores use term statistics of visible chunks only, /metrics and
/manifest count only visible data, and no answer shows a server path."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
from fastapi.testclient import TestClient
from support.serving import API_KEYS, INTERNAL_KEY, build_and_publish, make_workspace

from livemem.index import postings, records, sparse
from livemem.version.store import IndexHome
from serving.app import create_app
from serving.settings import Settings

INTERNAL = {"X-API-Key": INTERNAL_KEY}


@pytest.fixture(scope="module")
def home(tmp_path_factory, embedder) -> IndexHome:
    root = tmp_path_factory.mktemp("visibility")
    home = IndexHome(root / "rag_index")
    build_and_publish(make_workspace(root), home, embedder)
    return home


@pytest.fixture(scope="module")
def client(home, embedder):
    settings = Settings(index_dir=home.root, api_keys=API_KEYS, warm_up=False, cache_size=0)
    with TestClient(create_app(settings, embedder)) as c:
        yield c


def what_the_caller_learns(body: dict) -> dict:
    """A /context answer without its message, trace id, timings and scores (the two messages differ in one
    letter, so their embeddings differ a little): the route, and which evidence in which order."""
    route = {k: v for k, v in body["route"].items() if k != "steps_ms"}
    ids = {"unstructured": "chunk_id", "spatial": "entity_id", "registry": "local_resource_id"}
    return {
        "route": route,
        "evidence": {section: [item[key] for item in body[section]] for section, key in ids.items()},
        "facts": body["structured_facts"],
        "citations": [c["id"] for c in body["citations"]],
    }


@pytest.mark.parametrize(
    "template",
    [
        "What are the SNAP emergency steps in the {} collection?",
        "escalation protocol from {} collection",
        "zebra protocol supervisor hotline in the {} collection",
    ],
)
def test_context_answers_a_hidden_collection_like_a_nonexistent_one(client, template):
    hidden = client.post("/context", json={"message": template.format("internal_playbooks")}).json()
    missing = client.post("/context", json={"message": template.format("internal_playbookz")}).json()
    assert what_the_caller_learns(hidden) == what_the_caller_learns(missing)
    assert hidden["route"]["response_class"] != "refuse"
    assert "internal_playbooks" not in json.dumps({k: v for k, v in hidden.items() if k not in ("message", "prompt")})
    internal = client.post("/context", json={"message": template.format("internal_playbooks")}, headers=INTERNAL)
    assert internal.json()["route"]["filters"].get("collections") == ["internal_playbooks"]


def test_public_bm25_scores_use_only_public_term_statistics(client):
    """'SNAP food assistance' occurs in the internal playbook too: with one index over every chunk the public
    scores would depend on it. They equal scores from an index over the public chunks alone."""
    snap = client.app.state.serving.reader.snapshot()
    public_rows = np.flatnonzero(snap.columns["access"] == "public")
    assert 0 < public_rows.size < snap.size
    texts = [records.embed_text(snap.rows[r]["content"], json.loads(snap.rows[r]["heading_path"])) for r in public_rows]
    headings = [postings.heading_text(json.loads(snap.rows[r]["heading_path"])) for r in public_rows]
    # sparse mode: the chunk text's BM25 plus 0.2 x its heading path's, each with the public chunks' statistics alone
    public_only = bm25s_scores(texts, "SNAP food assistance", public_rows, snap.size) + np.float32(
        sparse.HEADINGS_WEIGHT
    ) * bm25s_scores(headings, "SNAP food assistance", public_rows, snap.size)
    everything = snap.sparse_for(snap.access_levels).field_scores("SNAP food assistance")
    body = {"query": "SNAP food assistance", "mode": "sparse", "top_k": 20}
    results = client.post("/query", json=body).json()["results"]
    assert results and all(r["collection"] != "internal_playbooks" for r in results)
    for r in results:
        row = snap.row_of[r["chunk_id"]]
        assert r["scores"]["sparse"] == pytest.approx(float(public_only[row]), rel=1e-5)
        assert float(everything[row]) != pytest.approx(float(public_only[row]), rel=1e-3)  # the test means something
    internal = client.post("/query", json=body, headers=INTERNAL).json()["results"]
    for r in internal:
        assert r["scores"]["sparse"] == pytest.approx(float(everything[snap.row_of[r["chunk_id"]]]), rel=1e-5)


def bm25s_scores(texts: list[str], query: str, rows: np.ndarray, size: int) -> np.ndarray:
    """Scores from an independent bm25s index over ``texts`` alone (Lucene BM25, the same tokenizer settings),
    placed at ``rows`` of ``size``."""
    import bm25s
    import Stemmer
    from bm25s.tokenization import Tokenizer

    tokenizer = Tokenizer(stopwords="en", stemmer=Stemmer.Stemmer("english"))
    index = bm25s.BM25(method="lucene", k1=sparse.K1, b=sparse.B)
    index.index(tokenizer.tokenize(texts, return_as="tuple", show_progress=False), show_progress=False)
    ids = tokenizer.tokenize([query], update_vocab=False, return_as="ids", show_progress=False)[0]
    vocab = {i: w for w, i in tokenizer.get_vocab_dict().items()}
    known = [index.vocab_dict[vocab[i]] for i in ids if vocab.get(i) in index.vocab_dict]
    out = np.zeros(size, dtype=np.float32)
    if known:
        out[rows] = index.get_scores_from_ids(known)
    return out


def test_bm25_scores_equal_an_index_over_exactly_the_chunks_in_scope(client):
    """Segment postings scored with per-version, per-scope statistics equal bm25s over the scope's chunks only."""
    snap = client.app.state.serving.reader.snapshot()
    texts = [records.embed_text(r["content"], json.loads(r["heading_path"])) for r in snap.rows]
    for scope in ({"public"}, {"internal"}, {"public", "internal"}):
        rows = np.flatnonzero(np.isin(snap.columns["access"], sorted(scope)))
        for query in ("heating bill help", "SNAP food assistance SNAP", "escalation protocol zebra"):
            want = bm25s_scores([texts[r] for r in rows], query, rows, snap.size)
            got = snap.sparse_for(frozenset(scope)).scores(query)
            assert np.allclose(got, want, rtol=1e-5, atol=1e-6), (scope, query)
    assert snap.sparse_for(frozenset({"public"})) is snap.sparse_for(frozenset({"public"}))  # statistics kept


def test_metrics_count_only_chunks_the_caller_may_read(client):
    snap = client.app.state.serving.reader.snapshot()
    public = int((snap.columns["access"] == "public").sum())

    def chunks(headers: dict) -> float:
        text = client.get("/metrics", headers=headers).text
        return float(re.search(r"^livemem_index_chunks (\S+)$", text, re.MULTILINE).group(1))

    assert chunks({}) == public < snap.size
    assert chunks(INTERNAL) == snap.size


def test_no_server_paths_in_manifest_or_503(client, home):
    root = str(home.root.parent)
    for headers in ({}, INTERNAL):
        shown = client.get("/manifest", headers=headers).json()
        assert root not in json.dumps(shown)
        assert {s["repo"] for s in shown["sources"].values()} == {"repo"}
    public = client.get("/manifest").json()
    assert "files" not in public and "segments" not in public  # sizes and counts would count the hidden level
    assert "files" in client.get("/manifest", headers=INTERNAL).json()
    version = home.current()
    broken = "20990101T000000000000Z"
    shutil.copytree(home.version_dir(version), home.version_dir(broken))
    (home.version_dir(broken) / "tables.duckdb").write_bytes(b"not a database")
    try:
        (home.root / "CURRENT").write_text(broken + "\n")
        response = client.get("/healthz")  # queries keep the last good version; health names the damage
        assert response.status_code == 503
        detail = response.json()["detail"]
        assert broken in detail and "tables.duckdb" in detail and root not in detail
    finally:
        (home.root / "CURRENT").write_text(version + "\n")
        shutil.rmtree(home.version_dir(broken))
    assert client.post("/query", json={"query": "SNAP"}).status_code == 200


def test_no_server_path_in_a_provenance_check(client, home):
    """``/chunks/{id}?verify=true`` on a repository that moved: `missing`, without saying where it was."""
    chunk = client.post("/query", json={"query": "Beckley LIHEAP", "top_k": 1}).json()["results"][0]["chunk_id"]
    repo = home.root.parent / "repo"
    repo.rename(repo.with_name("repo-moved"))
    try:
        verification = client.get(f"/chunks/{chunk}", params={"verify": "true"}).json()["verification"]
    finally:
        repo.with_name("repo-moved").rename(repo)
    assert verification["status"] == "missing" and str(home.root.parent) not in verification["detail"]
