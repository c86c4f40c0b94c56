"""Approximate search in a built index (issue 38): a build writes a graph for each segment of at least
``ann_min_rows`` rows, beside its parts and outside its content hash; serving maps it and answers the same top
results as exact search; a one-file change builds no graph for its small segment and leaves the large one's alone;
a damaged graph is left unused (searched exactly) and said in the log."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from livemem.engine.snapshot import load_snapshot
from livemem.index import scan
from livemem.index.ann import GRAPH_FILE
from livemem.ingest.build import build_version
from livemem.settings import BuildSettings, EngineConfig
from livemem.sources.config import load_sources
from livemem.version.store import IndexHome

TOPICS = ("heating help", "food pantry hours", "SNAP benefits", "flood recovery", "broadband grants", "bus routes")
QUESTIONS = ("where can I get help heating my home", "when is the food pantry open", "apply for SNAP",
             "grants for rural internet", "after the flood", "which bus goes downtown")  # fmt: skip


def publish(config, home: IndexHome, embedder, min_rows: int) -> str:
    result = build_version(config, home, embedder, settings=BuildSettings(ann_min_rows=min_rows))
    assert result.staged, result.reason
    home.publish(result.version_id, result.base_version, retention=50)
    return result.version_id


@pytest.fixture
def repo(make_repo):
    files = {
        f"docs/{TOPICS[i % 6].replace(' ', '-')}-{i:02d}.md": f"# {TOPICS[i % 6].title()} {i}\n\n"
        f"Notes number {i} on {TOPICS[i % 6]} in county {i % 9}.\n"
        for i in range(48)
    }
    return make_repo(files=files)


@pytest.fixture
def config(tmp_path, repo):
    path = tmp_path / "sources.yaml"
    path.write_text(f"sources:\n  - name: docs\n    repo: {repo.path}\n    collection: docs\n", encoding="utf-8")
    return load_sources(path)


@pytest.fixture
def graph_path(monkeypatch) -> EngineConfig:
    """The graph answers even for a few rows (by default a part with ≤ 20k allowed rows is scored exactly); the
    engine config the homes are read with: graphs on, 8 candidates (fewer than the 48 rows: the graph walk decides)."""
    monkeypatch.setattr(scan, "GRAPH_EXACT_ROWS", 4)
    monkeypatch.setattr(scan, "WALK_COST", 0)  # (a walk costs more than scoring 48 rows: taken all the same)
    monkeypatch.setenv("LIVEMEM_ANN_CANDIDATES", "8")  # as the app reads it (EngineConfig.from_env)
    return EngineConfig.defaults(ann="auto", ann_candidates=8)


def segment_meta(home: IndexHome, segment: str) -> dict:
    return json.loads((home.root / "parts" / segment / "segment.json").read_text())


def test_a_build_writes_the_graph_outside_the_segment_id_and_serving_answers_as_exact(
    tmp_path, config, embedder, graph_path
) -> None:
    home = IndexHome(tmp_path / "index", engine=graph_path)
    version = publish(config, home, embedder, min_rows=10)
    (segment,) = [e["id"] for e in home.manifest(version)["segments"]]
    meta = segment_meta(home, segment)
    graph = home.root / "parts" / segment / GRAPH_FILE
    assert meta["graph"]["rows"] == meta["chunks"] == 48 and graph.stat().st_size == meta["graph"]["size"]
    assert GRAPH_FILE not in meta["files"]  # derived from the vectors: not part of the segment's identity
    plain = IndexHome(tmp_path / "plain")
    assert [e["id"] for e in plain.manifest(publish(config, plain, embedder, min_rows=0))["segments"]] == [segment]
    assert not (plain.root / "parts" / segment / GRAPH_FILE).exists()

    snap = load_snapshot(home, version)
    assert snap.dense.graphs[0] is not None and snap.engine == graph_path
    scanned = snap.with_engine(graph_path.replace(ann="exact"))  # the same version, every row scanned
    for question in QUESTIONS:
        vector = embedder.encode([question])[0]
        with_graph = snap.dense.top(vector, 5)
        exact = scanned.dense.top(vector, 5)
        assert np.array_equal(with_graph[0], exact[0]) and np.array_equal(with_graph[1], exact[1])
        assert snap.dense.scan(vector).rest.size == 0  # nothing scanned: the graph gave the candidates


def test_a_one_file_change_builds_no_graph_and_keeps_the_large_one(
    tmp_path, repo, config, embedder, graph_path
) -> None:
    home = IndexHome(tmp_path / "index", engine=graph_path)
    first = publish(config, home, embedder, min_rows=10)
    (big,) = [e["id"] for e in home.manifest(first)["segments"]]
    graph = home.root / "parts" / big / GRAPH_FILE
    before = graph.stat()
    repo.commit({"docs/heating-help-00.md": "# Heating Help 0\n\nEdited: the winter heating office moved.\n"})
    second = publish(config, home, embedder, min_rows=10)
    segments = [e["id"] for e in home.manifest(second)["segments"]]
    (small,) = set(segments) - {big}
    assert "graph" not in segment_meta(home, small) and not (home.root / "parts" / small / GRAPH_FILE).exists()
    after = graph.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # not rebuilt, not copied
    snap = load_snapshot(home, second)
    graphs = dict(zip(segments, snap.dense.graphs, strict=True))
    assert graphs[big] is not None and graphs[small] is None
    vector = embedder.encode(["the winter heating office moved"])[0]
    rows, _ = snap.dense.top(vector, 3)
    assert "winter heating office moved" in snap.rows[int(rows[0])]["content"]  # found in the scanned small part
    deleted_old = snap.dense.inverse(segments.index(big))
    assert (deleted_old == -1).sum() == 1  # the edited file's old row is not this version's: never a candidate


def test_a_damaged_graph_is_left_unused_and_searched_exactly(tmp_path, config, embedder, graph_path, caplog) -> None:
    home = IndexHome(tmp_path / "index", engine=graph_path)
    version = publish(config, home, embedder, min_rows=10)
    (segment,) = [e["id"] for e in home.manifest(version)["segments"]]
    graph = home.root / "parts" / segment / GRAPH_FILE
    graph.chmod(0o640)
    size = graph.stat().st_size
    graph.write_bytes(b"\0" * size)  # same size, nothing usable
    with caplog.at_level(logging.WARNING, logger="livemem.engine.segments"):
        snap = load_snapshot(home, version)
    assert snap.dense.graphs == [None]
    assert any("searched exactly" in r.getMessage() and segment in r.getMessage() for r in caplog.records)
    vector = embedder.encode([QUESTIONS[0]])[0]
    rows, scores = snap.dense.top(vector, 3)
    assert rows.size == 3 and np.array_equal(scores, snap.dense.scores(vector, rows))


def test_graph_min_rows_is_a_build_setting_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("LIVEMEM_ANN_MIN_ROWS", "1000")
    assert BuildSettings.from_env().ann_min_rows == 1000
    monkeypatch.setenv("LIVEMEM_ANN_MIN_ROWS", "-1")
    with pytest.raises(Exception, match="LIVEMEM_ANN_MIN_ROWS"):
        BuildSettings.from_env()


def test_the_query_api_answers_the_same_with_the_graph_as_scanning_every_row(
    tmp_path, config, embedder, graph_path, monkeypatch
) -> None:
    """Through the real app (TestClient): ``LIVEMEM_ANN=auto`` (the graph) and ``exact`` give the same chunks and
    scores for dense and hybrid queries, with a filter too."""
    from fastapi.testclient import TestClient

    from serving.app import create_app
    from serving.settings import Settings

    home = IndexHome(tmp_path / "index")
    publish(config, home, embedder, min_rows=10)

    def answers(mode: str) -> list:
        monkeypatch.setenv("LIVEMEM_ANN", mode)
        got = []
        app = create_app(Settings(index_dir=home.root, warm_up=False), embedder)
        with TestClient(app) as client:
            for question in QUESTIONS:
                for body in (
                    {"mode": "dense"},
                    {"mode": "hybrid"},
                    {"mode": "dense", "filters": {"path_prefix": "docs/food"}},
                ):
                    r = client.post("/query", json={"query": question, "top_k": 5, **body})
                    assert r.status_code == 200, r.text
                    got.append([(h["chunk_id"], round(h["score"], 6)) for h in r.json()["results"]])
        engine = app.state.serving.reader.snapshot().engine  # read once, when the app started
        assert (engine.ann, engine.ann_candidates) == (mode, 8)
        return got

    with_graph = answers("auto")
    assert any(with_graph) and with_graph == answers("exact")


def test_hybrid_with_bm25_beside_the_walks_answers_as_scored_on_one_thread(
    tmp_path, make_repo, embedder, graph_path, monkeypatch
) -> None:
    """Several segments with a graph each (a split build), chunks with sentence vectors: hybrid's BM25 in pieces
    shared by the walk threads and the request's thread (``Pieces``), and the blended rows' sentences half on a walk
    thread, give the same chunks, scores, BM25 and sentence cosines as BM25 scored on the request's thread alone —
    and as every row scanned (no walk threads: the sentences on the request's thread)."""
    from livemem.index import sparse
    from livemem.query import retrieval
    from livemem.query.retrieval import Retriever
    from livemem.query.types import Query

    files = {
        f"docs/{TOPICS[i % 6].replace(' ', '-')}-{i:02d}.md": f"# {TOPICS[i % 6].title()} {i}\n\n"
        f"Notes number {i} on {TOPICS[i % 6]} in county {i % 9}. The office opens at {8 + i % 3} am. "
        f"Bring proof of address for {TOPICS[(i + 1) % 6]}.\n"
        for i in range(60)
    }
    path = tmp_path / "sources.yaml"
    path.write_text(f"sources:\n  - name: docs\n    repo: {make_repo(files=files).path}\n    collection: docs\n")
    home = IndexHome(tmp_path / "index", engine=graph_path)
    monkeypatch.setattr("livemem.ingest.read.CHUNK_BATCH_FILES", 4)  # segments flushed between batches of 4 files
    result = build_version(load_sources(path), home, embedder, settings=BuildSettings(ann_min_rows=10, segment_rows=16))
    home.publish(result.version_id, result.base_version, retention=50)
    snap = load_snapshot(home, result.version_id)
    assert sum(g is not None for g in snap.dense.graphs) >= 3 and snap.dense.has_sentences
    monkeypatch.setattr(sparse, "PIECE_ROWS", 5)  # several pieces per segment
    monkeypatch.setattr(retrieval, "SHARED_SENTENCE_ROWS", 2)  # the blended rows' sentences: half on a walk thread
    retriever = Retriever(embedder)
    collections = snap.collections_for(frozenset({"public"}))

    def answers() -> list:
        got = []
        for question in QUESTIONS:
            found = retriever.search(snap, Query(text=question, top_k=8, mode="hybrid"), collections)
            got.append([(h.row, h.score, h.sparse, h.dense, h.sentence) for h in found.chunks])
        return got

    prepare = sparse.Pieces._prepare

    def counted(self):  # how many pieces each question's BM25 was cut into
        prepare(self)
        cuts.append(len(self.pieces))

    cuts: list[int] = []
    monkeypatch.setattr(sparse.Pieces, "_prepare", counted)
    beside = answers()
    assert min(cuts) > len(snap.dense.parts)  # several pieces per segment, shared by the threads
    assert any(h[4] is not None for got in beside for h in got)  # sentences were blended
    loaded = snap
    snap = loaded.with_engine(graph_path.replace(scan_threads=0))  # BM25 on the request's thread, after the walks
    assert answers() == beside
    snap = loaded.with_engine(graph_path.replace(scan_threads=1, ann="exact"))
    assert answers() == beside
