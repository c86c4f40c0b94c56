"""Serving across index versions: swaps mid-traffic, cache invalidation, provenance checks, unusable versions."""

from __future__ import annotations

import threading
import time

import pytest
from fastapi.testclient import TestClient
from support.serving import FILES, build_and_publish, commit_files, make_workspace

from livemem.engine.snapshot import load_snapshot
from livemem.model.embedding import Embedder
from livemem.version.store import IndexHome
from serving.app import create_app
from serving.settings import Settings


@pytest.fixture
def workspace(tmp_path, embedder):
    sources = make_workspace(tmp_path)
    home = IndexHome(tmp_path / "rag_index")
    version = build_and_publish(sources, home, embedder)
    return sources, home, version


def client_for(home: IndexHome, embedder: Embedder, **settings) -> TestClient:
    return TestClient(create_app(Settings(index_dir=home.root, warm_up=False, **settings), embedder))


def version_ids(home: IndexHome, version: str) -> set[str]:
    return set(load_snapshot(home, version).ids)


def test_version_swap_mid_traffic_answers_each_query_from_one_complete_version(workspace, embedder):
    sources, home, v1 = workspace
    responses: list[tuple[int, dict]] = []
    stop = threading.Event()
    queries = ["Mingo County SNAP office", "Oak Hill SNAP", "heating help", "council memory"]

    with client_for(home, embedder, cache_size=0) as client:

        def traffic(query: str) -> None:
            while not stop.is_set():
                response = client.post("/query", json={"query": query, "top_k": 20})
                responses.append((response.status_code, response.json()))

        threads = [threading.Thread(target=traffic, args=(q,)) for q in queries]
        for thread in threads:
            thread.start()
        time.sleep(0.5)
        mingo = "# Mingo County\n\n## SNAP\n\nSNAP applications in Mingo County go to the Williamson office.\n"
        commit_files(sources.parent / "repo", {"benefits/mingo-county.md": mingo}, "add Mingo County")
        v2 = build_and_publish(sources, home, embedder)
        deadline = time.monotonic() + 30
        while not any(r.get("index_version") == v2 for _, r in responses[-8:]) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.3)
        stop.set()
        for thread in threads:
            thread.join()

    assert all(status == 200 for status, _ in responses)
    ids = {v1: version_ids(home, v1), v2: version_ids(home, v2)}
    seen = {v1: 0, v2: 0}
    for _, data in responses:
        version = data["index_version"]
        seen[version] += 1
        assert {r["chunk_id"] for r in data["results"]} <= ids[version]
        has_mingo = any("Williamson" in r["content"] for r in data["results"])
        assert not has_mingo or version == v2
    assert seen[v1] > 0 and seen[v2] > 0
    last = [data for _, data in responses[-len(queries) :]]
    assert all(d["index_version"] == v2 for d in last)


def test_publishing_a_version_invalidates_cached_results(workspace, embedder):
    sources, home, v1 = workspace
    body = {"query": "Oak Hill office SNAP applications", "top_k": 1}
    with client_for(home, embedder) as client:
        first = client.post("/query", json=body).json()
        assert first["cached"] is False and first["index_version"] == v1
        assert client.post("/query", json=body).json()["cached"] is True
        moved = FILES["benefits/fayette-county.md"].replace(
            "Oak Hill office on Main Street", "Oak Hill office on Court Street"
        )
        commit_files(sources.parent / "repo", {"benefits/fayette-county.md": moved}, "office moved")
        v2 = build_and_publish(sources, home, embedder)
        after = client.post("/query", json=body).json()
        assert after["cached"] is False and after["index_version"] == v2
        assert "Court Street" in after["results"][0]["content"]
        metrics = client.get("/metrics").text
        assert "livemem_cache_hits_total 1.0" in metrics and "livemem_cache_misses_total 2.0" in metrics
        assert "livemem_index_swaps_total 1.0" in metrics


def test_verify_reports_changed_and_missing_provenance(workspace, embedder):
    sources, home, _ = workspace
    repo = sources.parent / "repo"
    with client_for(home, embedder) as client:
        fayette = client.post("/query", json={"query": "Oak Hill SNAP", "top_k": 1}).json()["results"][0]
        raleigh = client.post("/query", json={"query": "Beckley LIHEAP", "top_k": 1}).json()["results"][0]
        assert raleigh["provenance"]["path"] == "benefits/raleigh-county.md"

        def status(chunk: dict) -> str:
            return client.get(f"/chunks/{chunk['chunk_id']}?verify=true").json()["verification"]["status"]

        assert status(fayette) == status(raleigh) == "current"
        edited = FILES["benefits/fayette-county.md"].replace("Oak Hill", "Fayetteville")
        commit_files(repo, {"benefits/fayette-county.md": edited, "benefits/raleigh-county.md": None}, "edit")
        assert status(fayette) == "changed"
        assert status(raleigh) == "missing"


def test_no_published_index_is_503_saying_what_to_run(tmp_path, embedder):
    with client_for(IndexHome(tmp_path / "empty"), embedder) as client:
        for response in (
            client.get("/healthz"),
            client.post("/query", json={"query": "anything"}),
            client.get("/manifest"),
            client.get("/chunks/00000000-0000-4000-8000-000000000000"),
        ):
            assert response.status_code == 503
            assert "no index published yet: run `make materialize`" in response.json()["detail"]
        assert client.get("/metrics").status_code == 200


@pytest.mark.parametrize("damage", ["dense", "postings", "rows", "tables"])
def test_corrupt_version_is_503_naming_the_version_and_the_fix(workspace, embedder, damage):
    """A new version whose own segment or tables were damaged on disk after publishing: 503 naming it, and the
    version already loaded keeps answering."""
    sources, home, version = workspace
    with client_for(home, embedder) as client:
        assert client.get("/healthz").status_code == 200
        assert client.post("/query", json={"query": "SNAP"}).json()["index_version"] == version
        mingo = "# Mingo County\n\n## SNAP\n\nSNAP applications in Mingo County go to the Williamson office.\n"
        commit_files(sources.parent / "repo", {"benefits/mingo-county.md": mingo}, "add Mingo County")
        broken = build_and_publish(sources, home, embedder)
        shared = {e["id"] for e in home.manifest(version)["segments"]}
        (added,) = [e["id"] for e in home.manifest(broken)["segments"] if e["id"] not in shared]
        segment = home.root / "parts" / added
        target = {
            "dense": segment / "dense.npy",
            "postings": segment / "postings.npz",
            "rows": segment / "chunks.parquet",
            "tables": home.version_dir(broken) / "tables.duckdb",
        }[damage]
        target.chmod(0o644)
        target.write_bytes(b"not what it should be")
        health = client.get("/healthz")
        assert health.status_code == 503
        detail = health.json()["detail"]
        assert broken in detail and "make materialize" in detail and f"still answering from version {version}" in detail
        assert str(home.root) not in detail
        response = client.post("/query", json={"query": "SNAP"})  # the last good version keeps serving
        assert response.status_code == 200 and response.json()["index_version"] == version
        (home.root / "CURRENT").write_text(version + "\n")  # rollback: healthy again
        assert client.get("/healthz").status_code == 200


def test_a_failing_trace_write_never_fails_a_query(workspace, embedder, tmp_path):
    _, home, _ = workspace
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    with client_for(home, embedder, trace_dir=blocker) as client:
        response = client.post("/query", json={"query": "SNAP"})
        assert response.status_code == 200 and response.json()["results"]
        assert "livemem_trace_write_failures_total 1.0" in client.get("/metrics").text
        feedback = client.post("/feedback", json={"trace_id": response.json()["trace_id"], "useful": False})
        assert feedback.status_code == 503
