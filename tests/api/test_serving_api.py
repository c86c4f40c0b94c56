"""The serving API on an index built and published by the platform from a real git repository."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from support.serving import API_KEYS, FILES, INTERNAL_KEY, build_and_publish, make_workspace

from livemem.schemas import errors_for
from livemem.usage.traces import trace_key
from livemem.version.store import IndexHome
from serving.app import create_app
from serving.settings import Settings

INTERNAL = {"X-API-Key": INTERNAL_KEY}
PUBLIC_COLLECTIONS = ["code", "governance", "wv_benefits"]


@pytest.fixture(scope="module")
def served(tmp_path_factory, embedder):
    root = tmp_path_factory.mktemp("serving")
    home = IndexHome(root / "rag_index")
    version = build_and_publish(make_workspace(root), home, embedder)
    settings = Settings(index_dir=home.root, api_keys=API_KEYS, warm_up=False)
    with TestClient(create_app(settings, embedder)) as client:
        yield client, home, version


@pytest.fixture
def client(served) -> TestClient:
    return served[0]


def ask(client: TestClient, headers: dict | None = None, **body) -> dict:
    response = client.post("/query", json=body, headers=headers or {})
    assert response.status_code == 200, response.text
    return response.json()


def result_files(data: dict) -> list[str]:
    return [r["provenance"]["path"] for r in data["results"]]


@pytest.mark.parametrize("mode", ["dense", "sparse", "hybrid"])
def test_each_mode_ranks_the_matching_chunk_first(client, served, mode):
    data = ask(client, query="Oak Hill SNAP office in Fayette County", mode=mode, top_k=3)
    assert data["index_version"] == served[2]
    assert data["mode"] == mode
    top = data["results"][0]
    assert top["provenance"]["path"] == "benefits/fayette-county.md"
    assert "Oak Hill" in top["content"]
    scores = [r["score"] for r in data["results"]]
    assert scores == sorted(scores, reverse=True)
    for result in data["results"]:
        record = {k: result[k] for k in ("chunk_id", "source", "content", "seal_state", "last_breath_seen",
                                         "attention_score", "provenance", "metadata")}  # fmt: skip
        assert errors_for("chunk", record) == []
        assert result["collection"] == result["metadata"]["collection"]
        assert len(result["provenance"]["commit"]) == 40
    if mode == "dense":
        assert top["scores"]["sparse"] is None and 0 < top["scores"]["dense"] <= 1
    if mode == "sparse":
        assert top["scores"]["dense"] is None and top["scores"]["sparse"] > 0


def test_hybrid_blends_the_best_sentence_into_chunks_that_have_sentence_vectors(client):
    """The constitution's chunk has two sentences (livemem.index.sentences): its hybrid score is
    (1 - 0.67) x its cosine + 0.67 x its best sentence's + 0.3 x its BM25 over the best; chunks without sentence
    vectors keep cosine + 0.3 x BM25 / best (docs/serving.md: the weights on an index with sentence vectors). Dense
    mode blends the same way, without BM25."""
    question = "are sealed decisions authoritative"
    best_bm25 = ask(client, query=question, mode="sparse", top_k=1)["results"][0]["score"]
    results = ask(client, query=question, mode="hybrid", top_k=5)["results"]
    assert results[0]["provenance"]["path"] == "governance/CONSTITUTION.md"
    assert results[0]["scores"]["sentence"] > results[0]["scores"]["dense"]  # the sentence that says it
    for result in results:
        parts = result["scores"]
        dense, bm25 = max(parts["dense"], 0.0), 0.3 * (parts["sparse"] or 0.0) / best_bm25
        if parts["sentence"] is not None:
            dense = 0.33 * dense + 0.67 * max(parts["sentence"], 0.0)
        assert result["score"] == pytest.approx(dense + bm25, abs=1e-5), result["provenance"]["path"]
        assert result["score_normalized"] == pytest.approx(result["score"] / 1.3, abs=1e-5)
    assert sum(r["scores"]["sentence"] is not None for r in results) == 1
    # dense mode blends its first chunks by cosine the same way, without BM25; sparse mode is BM25 alone
    dense_results = ask(client, query=question, mode="dense")["results"]
    assert dense_results[0]["provenance"]["path"] == "governance/CONSTITUTION.md"
    assert dense_results[0]["scores"]["sentence"] is not None
    for result in dense_results:
        parts = result["scores"]
        want = parts["dense"]
        if parts["sentence"] is not None:
            want = 0.33 * max(parts["dense"], 0.0) + 0.67 * max(parts["sentence"], 0.0)
        assert result["score"] == pytest.approx(want, abs=1e-5), result["provenance"]["path"]
        assert result["score_normalized"] == pytest.approx(max(result["score"], 0.0), abs=1e-5)
    assert all(r["scores"]["sentence"] is None for r in ask(client, query=question, mode="sparse")["results"])


def test_results_by_source_groups_results_by_collection(client):
    data = ask(client, query="SNAP food assistance", top_k=10)
    assert len({r["collection"] for r in data["results"]}) >= 2
    grouped = data["results_by_source"]
    assert set(grouped) == {r["collection"] for r in data["results"]}
    for collection, results in grouped.items():
        assert [r["chunk_id"] for r in results] == [
            r["chunk_id"] for r in data["results"] if r["collection"] == collection
        ]


@pytest.mark.parametrize(
    ("filters", "expected_paths"),
    [
        ({"source": "client-code"}, {"code/client.py"}),
        ({"source": ["governance", "client-code"]}, {"code/client.py", "governance/CONSTITUTION.md", "governance/BREATH.md"}),
        ({"path_prefix": "benefits/r"}, {"benefits/raleigh-county.md"}),
        ({"type": "code"}, {"code/client.py"}),
        ({"county": "Fayette"}, {"benefits/fayette-county.md"}),
        ({"county": ["Fayette", "Raleigh"]}, {"benefits/fayette-county.md", "benefits/raleigh-county.md"}),
        ({"dataset": "wv_benefits"}, {"benefits/fayette-county.md", "benefits/raleigh-county.md", "benefits/statewide-faq.md"}),
        ({"seal_state": "SEALED"}, {"governance/CONSTITUTION.md"}),
        ({"updated_after": "2025-01-01T00:00:00Z"}, {"benefits/raleigh-county.md"}),
        ({"updated_before": "2021-01-01", "county": "Raleigh"}, set()),
        ({"min_attention": 0.5}, set()),
        ({"last_seen_breath": "Δ1"}, set()),
        ({"worldview_id": "wv-1"}, set()),
        ({"local_resource_id": "lr-1"}, set()),
    ],
)  # fmt: skip
@pytest.mark.parametrize("mode", ["dense", "hybrid"])
def test_filters_apply_before_ranking(client, filters, expected_paths, mode):
    # An unrelated query with a large top_k: every matching chunk comes back, and only those.
    data = ask(client, query="weather forecast tomorrow", top_k=50, filters=filters, mode=mode)
    assert set(result_files(data)) == expected_paths
    assert data["candidates"] == len(data["results"])


def test_top_k_is_filled_when_enough_chunks_match(client):
    data = ask(client, query="the constitution of the council", top_k=2, filters={"dataset": "wv_benefits"})
    assert len(data["results"]) == 2
    assert all(r["metadata"]["dataset"] == "wv_benefits" for r in data["results"])


def test_collections_restrict_results(client):
    data = ask(client, query="SNAP food assistance", collections=["governance", "code"], top_k=20)
    assert {r["collection"] for r in data["results"]} <= {"governance", "code"}


def test_documents_return_each_parent_once_with_its_whole_text(client):
    data = ask(client, query="Fayette County SNAP Medicaid income", top_k=5, **{"return": "documents"})
    assert data["return"] == "documents"
    parents = [r["parent_id"] for r in data["results"]]
    assert len(parents) == len(set(parents)) == 5
    top = data["results"][0]
    assert top["provenance"]["path"] == "benefits/fayette-county.md"
    assert top["content"] == FILES["benefits/fayette-county.md"]
    assert len(top["matched_chunk_ids"]) >= 2  # both sections matched, reported under one document
    assert top["chunk_id"] == top["matched_chunk_ids"][0]
    assert top["metadata"]["chunk_count"] >= 2


def test_min_score_drops_weak_results(client):
    everything = ask(client, query="Beckley heating LIHEAP", mode="dense", top_k=20)
    threshold = everything["results"][1]["score"]
    data = ask(client, query="Beckley heating LIHEAP", mode="dense", top_k=20, min_score=threshold)
    assert len(data["results"]) == 2
    assert all(r["score"] >= threshold for r in data["results"])


def test_recency_bias_lifts_recently_updated_chunks(client):
    query = "county office applications"
    plain = ask(client, query=query, mode="dense", top_k=20, filters={"dataset": "wv_benefits"})
    biased = ask(client, query=query, mode="dense", top_k=20, filters={"dataset": "wv_benefits"}, recency_bias=5)
    rank = {r["provenance"]["path"]: i for i, r in enumerate(reversed(plain["results"]))}
    assert biased["results"][0]["provenance"]["path"] == "benefits/raleigh-county.md"
    assert rank["benefits/raleigh-county.md"] < len(plain["results"]) - 1  # it was not first without the bias


QUERIES = [
    "zebra protocol",
    "caseworker playbook escalation",
    "supervisor hotline",
    "SNAP food assistance emergencies",
    "Caseworker",
    "escalation zebra supervisor",
    "living memory",
    "what does the playbook say",
]


@pytest.mark.parametrize("mode", ["dense", "sparse", "hybrid"])
@pytest.mark.parametrize("return_", ["chunks", "documents"])
def test_internal_collections_never_reach_the_public_role(client, mode, return_):
    for query in QUERIES:
        data = ask(client, query=query, mode=mode, top_k=50, **{"return": return_})
        assert "internal_playbooks" not in data["results_by_source"]
        for result in data["results"]:
            assert result["metadata"]["access"] == "public"
            assert "zebra" not in result["content"]
    internal = ask(client, INTERNAL, query="zebra protocol escalation", mode=mode, **{"return": return_})
    assert internal["results"][0]["collection"] == "internal_playbooks"


def test_internal_chunks_are_404_for_the_public_role(client):
    internal = ask(client, INTERNAL, query="zebra protocol", top_k=1)["results"][0]
    public = ask(client, query="Oak Hill SNAP", top_k=1)["results"][0]
    assert client.get(f"/chunks/{internal['chunk_id']}").status_code == 404
    assert client.get(f"/chunks/{internal['chunk_id']}", headers=INTERNAL).json()["content"] == internal["content"]
    got = client.get(f"/chunks/{public['chunk_id']}").json()
    assert got["content"] == public["content"] and got["provenance"] == public["provenance"]


def test_public_role_cannot_name_internal_collections(client):
    response = client.post("/query", json={"query": "zebra", "collections": ["internal_playbooks"]})
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert detail["valid_collections"] == PUBLIC_COLLECTIONS
    assert "internal_playbooks" in detail["message"]  # echoes what was asked, lists only what is visible


def test_manifest_hides_internal_collections_from_public(client, served):
    public = client.get("/manifest").json()
    internal = client.get("/manifest", headers=INTERNAL).json()
    assert public["version_id"] == internal["version_id"] == served[2]
    assert sorted(public["collections"]) == PUBLIC_COLLECTIONS
    assert "caseworker" not in public["sources"] and "caseworker" not in json.dumps(public)
    assert "internal_playbooks" in internal["collections"]


def test_chunk_verify_reports_current(client):
    chunk = ask(client, query="Oak Hill SNAP", top_k=1)["results"][0]
    got = client.get(f"/chunks/{chunk['chunk_id']}", params={"verify": "true"}).json()
    assert got["verification"]["status"] == "current"
    assert got["verification"]["indexed_commit"] == chunk["provenance"]["commit"]


def test_healthz_and_metrics(client, served):
    health = client.get("/healthz").json()
    assert health["status"] == "ok" and health["index_version"] == served[2]
    assert health["index_age_s"] >= 0
    body = {"query": "metrics check query", "top_k": 3}
    assert client.post("/query", json=body).json()["cached"] is False
    assert client.post("/query", json={**body, "query": "  Metrics CHECK query "}).json()["cached"] is True
    text = client.get("/metrics").text
    assert 'livemem_http_requests_total{method="POST",route="/query",status="200"}' in text
    assert "livemem_http_request_duration_seconds_bucket" in text
    assert "livemem_cache_hits_total" in text and "livemem_cache_misses_total" in text
    # the index's vectors, named with their precision (docs/encoder.md)
    model = "sentence-transformers/all-MiniLM-L6-v2:int8-block"
    assert f'livemem_index_info{{model="{model}",version="{served[2]}"}} 1.0' in text


def test_query_and_feedback_write_schema_valid_traces(client, served):
    home = served[1]
    data = ask(client, query="Beckley LIHEAP", top_k=2)
    ids = [r["chunk_id"] for r in data["results"]]
    response = client.post("/feedback", json={"trace_id": data["trace_id"], "chunk_ids": ids[:1], "useful": True})
    assert response.status_code == 200 and response.json()["recorded"] == 1
    events = [
        json.loads(line) for f in sorted(Path(home.traces).glob("*.jsonl")) for line in f.read_text().splitlines()
    ]
    for event in events:
        assert errors_for("trace", event) == []
    mine = [e for e in events if e["trace_id"] == trace_key(data["trace_id"])]
    retrieval = [e for e in mine if e["event"] == "retrieval"]
    assert [e["chunk_id"] for e in retrieval] == ids
    assert retrieval[0]["breath_phase"] == "Δ3" and retrieval[0]["role"] == "public"
    assert retrieval[0]["query"] == "Beckley LIHEAP" and "query" not in retrieval[1]  # the query once
    assert [(e["chunk_id"], e["useful"]) for e in mine if e["event"] == "feedback"] == [(ids[0], True)]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": "x", "top_k": 0}, "top_k"),
        ({"query": "x", "top_k": "many"}, "top_k"),
        ({"query": "x", "mode": "semantic"}, "mode"),
        ({"query": "x", "return": "pages"}, "return"),
        ({"query": ""}, "query"),
        ({"query": "   "}, "query"),
        ({"top_k": 3}, "query"),
        ({"query": "x", "filters": {"county": 3}}, "county"),
        ({"query": "x", "filters": {"colour": "red"}}, "colour"),
        ({"query": "x", "filters": {"updated_after": "last tuesday"}}, "updated_after"),
        ({"query": "x", "filters": {"last_seen_breath": "yesterday"}}, "last_seen_breath"),
        ({"query": "x", "recency_bias": -1}, "recency_bias"),
        ({"query": "x", "collections": []}, "collections"),
    ],
)
def test_invalid_bodies_are_422_naming_the_field(client, body, field):
    response = client.post("/query", json=body)
    assert response.status_code == 422
    payload = response.json()
    assert any(field in map(str, error["loc"]) for error in payload["detail"])
    assert field in payload["message"]


def test_other_bad_input_is_4xx(client):
    assert client.post("/query", content=b"{not json", headers={"content-type": "application/json"}).status_code == 422
    unknown = client.post("/query", json={"query": "x", "collections": ["nope", "code"]})
    assert unknown.status_code == 400
    assert unknown.json()["detail"]["unknown"] == ["nope"]
    assert unknown.json()["detail"]["valid_collections"] == PUBLIC_COLLECTIONS
    missing = client.get("/chunks/00000000-0000-4000-8000-000000000000")
    assert missing.status_code == 404 and "no chunk" in missing.json()["detail"]
    assert client.get("/chunks/not-a-uuid").status_code == 422
    assert client.post("/query", json={"query": "x"}, headers={"X-API-Key": "wrong"}).status_code == 401
    assert client.post("/feedback", json={"trace_id": "nope", "useful": True}).status_code == 422
    assert client.post("/feedback", json={"trace_id": "00000000-0000-4000-8000-000000000000"}).status_code == 422


def test_openapi_documents_every_route(client):
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/query", "/chunks/{chunk_id}", "/manifest", "/healthz", "/metrics", "/feedback"} <= set(paths)


def test_score_normalized_is_one_scale_in_every_mode(client):
    """Issue 18: a threshold means the same whatever the mode. Each result carries ``score_normalized`` in [0, 1]
    (hybrid: relative to the most the fusion can give; dense: the cosine; sparse: relative to the query's best), and
    ``min_score_normalized`` keeps exactly the results at or above it, where a raw ``min_score`` of 0.3 would keep
    hybrid and BM25 results on unrelated scales."""
    for mode in ("hybrid", "dense", "sparse"):
        data = ask(client, query="Beckley heating LIHEAP", mode=mode, top_k=10)
        normalized = [r["score_normalized"] for r in data["results"]]
        assert data["results"] and all(0.0 <= n <= 1.0 for n in normalized), mode
        assert normalized == sorted(normalized, reverse=True), mode  # the same order as the scores
        if mode == "dense":
            assert normalized == [round(max(0.0, r["score"]), 6) for r in data["results"]]
        if mode == "sparse":
            assert normalized[0] == 1.0
        threshold = normalized[len(normalized) // 2]
        kept = ask(client, query="Beckley heating LIHEAP", mode=mode, top_k=10, min_score_normalized=threshold)
        assert [r["chunk_id"] for r in kept["results"]] == [
            r["chunk_id"] for r in data["results"] if r["score_normalized"] >= threshold
        ], mode


@pytest.mark.parametrize("return_", ["chunks", "documents"])
@pytest.mark.parametrize("mode", ["dense", "sparse", "hybrid"])
def test_query_body_is_exactly_the_response_model(client, mode, return_):
    """/query writes its JSON itself (not through the response model): the body must hold every field of
    QueryResponse and nothing else, for fresh and cached answers alike."""
    from serving.models import QueryResponse

    body = {"query": "food assistance application deadline", "top_k": 5, "mode": mode, "return": return_}
    for attempt in range(2):  # the second answer comes from the result cache
        data = ask(client, **body)
        assert data["results"] and data["cached"] is (attempt == 1)
        assert data == QueryResponse.model_validate(data).model_dump(mode="json", by_alias=True)
        assert list(data) == list(QueryResponse.model_json_schema(by_alias=True)["properties"])
