"""One engine config (``livemem.settings.EngineConfig``): the dense scan's knobs and the serving copies' directory in
one frozen value that the entry point builds once and the loader hands to what it builds. No module global holds
them, so two snapshots (or rows) of one process search and map under their own: what the module-level
``configure()`` functions it replaced could not do."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from livemem.engine.snapshot import load_snapshot, load_snapshot_at
from livemem.errors import ConfigError
from livemem.index import scan
from livemem.index.ann import GRAPH_FILE, Graph, build_graph
from livemem.index.dense import DenseRows
from livemem.settings import (
    CacheSettings,
    DenseSettings,
    EngineConfig,
    LivingMemorySettings,
    default_scan_threads,
)
from livemem.version import connect, mapped, parts_dir
from livemem.version.store import MANIFEST, IndexHome

DIM = 384


def test_the_config_is_built_once_from_the_environment_or_the_sections(monkeypatch, tmp_path) -> None:
    for name in ("LIVEMEM_DENSE_KERNEL", "LIVEMEM_SCAN_THREADS", "LIVEMEM_ANN", "LIVEMEM_SERVING_CACHE"):
        monkeypatch.delenv(name, raising=False)
    assert EngineConfig.from_env() == EngineConfig.defaults() == EngineConfig()
    assert EngineConfig().scan_threads == default_scan_threads() == min(2, os.cpu_count() or 1) - 1
    monkeypatch.setenv("LIVEMEM_DENSE_KERNEL", "fbgemm")
    monkeypatch.setenv("LIVEMEM_SCAN_THREADS", "0")
    monkeypatch.setenv("LIVEMEM_ANN", "exact")
    monkeypatch.setenv("LIVEMEM_ANN_CANDIDATES", "64")
    monkeypatch.setenv("LIVEMEM_ANN_BREADTH", "900")
    monkeypatch.setenv("LIVEMEM_SERVING_CACHE", str(tmp_path / "copies"))
    read = EngineConfig.from_env()
    assert read == EngineConfig("fbgemm", 0, "exact", 64, 900, tmp_path / "copies")
    assert read == LivingMemorySettings.from_env().engine  # the tree's sections give the same
    assert read == EngineConfig.from_settings(DenseSettings.from_env(), CacheSettings.from_env())
    assert EngineConfig.defaults() == EngineConfig()  # defaults never read the environment
    assert read.replace(ann="auto").ann == "auto" and read.ann == "exact"  # frozen: a new value
    with pytest.raises(AttributeError):
        read.ann = "auto"  # type: ignore[misc]
    assert hash(read) == hash(EngineConfig.from_env())  # a cache key (the GIS index's)
    monkeypatch.setenv("LIVEMEM_ANN", "sometimes")
    with pytest.raises(ConfigError, match="LIVEMEM_ANN"):
        EngineConfig.from_env()
    with pytest.raises(ConfigError, match="kernel"):
        EngineConfig(kernel="float8")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="ann_candidates"):
        EngineConfig(ann_candidates=0)


@pytest.fixture(scope="module")
def graph_rows(tmp_path_factory) -> tuple[np.ndarray, Graph, np.ndarray]:
    rng = np.random.default_rng(4)
    vectors = rng.standard_normal((300, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    path = tmp_path_factory.mktemp("graph") / GRAPH_FILE
    graph = Graph.open(path, build_graph(vectors, path, threads=1))
    queries = vectors[:5] + 0.1 * rng.standard_normal((5, DIM)).astype(np.float32)
    return vectors, graph, queries


def test_two_rows_of_one_process_search_under_their_own_configs(graph_rows, monkeypatch) -> None:
    """The same segment and graph, two configs: one walks the graph (auto) with its own breadth, the other scans
    every row (exact) on its own pool; both give the exact top 10 here, each asked as its config says."""
    vectors, graph, queries = graph_rows
    monkeypatch.setattr(scan, "GRAPH_EXACT_ROWS", 10)  # the graph answers even for these 300 rows
    monkeypatch.setattr(scan, "WALK_COST", 0)
    walked: list[int] = []
    search = Graph.search

    def counting(self, query, count, breadth=0):
        walked.append(breadth)
        return search(self, query, count, breadth)

    monkeypatch.setattr(Graph, "search", counting)
    parts = [(vectors, np.arange(vectors.shape[0]))]
    auto = DenseRows(parts, DIM, graphs=[graph], config=EngineConfig.defaults(ann="auto", ann_breadth=321))
    exact = DenseRows(parts, DIM, graphs=[graph], config=EngineConfig.defaults(ann="exact", scan_threads=0))
    wide = auto.with_config(auto.config.replace(ann_breadth=654))  # the same rows, another breadth
    assert auto.walks and wide.walks and not exact.walks
    assert exact.scan_pool() is None and auto.scan_pool() is scan.scan_pool(auto.config.scan_threads)
    for q in queries:
        want = np.argsort(-(vectors @ q), kind="stable")[:10]
        assert auto.scan(q).rest.size == 0  # the graph gave the candidates: nothing scanned
        assert exact.scan(q).rest.size == vectors.shape[0]  # every row scanned
        for rows in (auto, exact, wide):
            assert np.array_equal(rows.top(q, 10)[0], want)
    assert set(walked) == {321, 654}  # each walked with its own breadth; the exact rows never walked


def write_version(home: IndexHome, chunks: int = 40) -> str:
    """A published version written by hand (one segment of ``chunks`` rows with random vectors)."""
    from livemem.version.schema import LAYOUT_VERSION
    from livemem.version.segments import append_rows
    from livemem.version.staging import init_chunk_tables

    home.ensure()
    version = home.new_version_id()
    path = home.version_dir(version)
    path.mkdir(parents=True)
    con = connect(path, read_only=False)
    init_chunk_tables(con)
    rows = pd.DataFrame([
        {"chunk_id": f"c{i:03d}", "source": "docs", "collection": "docs", "access": "public",
         "content": f"chunk {i} about heating help", "content_hash": f"h{i}", "embed_hash": f"e{i}",
         "seal_state": "OPEN", "path": f"docs/{i}.md", "commit_sha": "a" * 40, "timestamp": "2026-01-01T00:00:00Z",
         "type": "markdown", "size": 7, "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
         "heading_path": "[]", "chunk_index": 0, "parent_id": f"p{i}", "domain": None}
        for i in range(chunks)
    ])  # fmt: skip
    vectors = np.random.default_rng(1).standard_normal((chunks, DIM)).astype(np.float32)
    segment = append_rows(con, path, rows, vectors=vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
    con.execute("INSERT INTO attention SELECT chunk_id, 0, NULL FROM chunks")
    con.close()
    manifest = {
        "version_id": version, "layout_version": LAYOUT_VERSION, "model": {"id": "test", "dim": DIM},
        "segments": [{"id": segment, "chunks": chunks, "parents": 0}],
        "collections": {"docs": {"access": "public", "chunks": chunks}},
    }  # fmt: skip
    (path / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    home.current_file.write_text(version + "\n", encoding="utf-8")
    return version


def copy_file(root: Path, segment: str) -> os.stat_result:
    return os.stat(root / segment / mapped.ARRAYS)


def test_two_snapshots_of_one_version_map_their_own_serving_copies(tmp_path) -> None:
    """One version loaded twice in one process, under two engine configs naming two serving-copy directories:
    each writes and maps the copy in its own, and each keeps the dense knobs it was given."""
    plain = IndexHome(tmp_path / "index")
    version = write_version(plain)
    first = EngineConfig.defaults(serving_cache=tmp_path / "first", ann="exact")
    second = EngineConfig.defaults(serving_cache=tmp_path / "second", ann_candidates=77)
    a = load_snapshot(IndexHome(plain.root, engine=first), version)
    b = load_snapshot_at(plain.version_dir(version), version, second)
    (segment,) = a.segments
    parts = parts_dir(a.path)
    roots = {name: mapped.cache_root(parts, config.serving_cache) for name, config in (("a", first), ("b", second))}
    assert roots["a"].parent == tmp_path / "first" and roots["b"].parent == tmp_path / "second"
    assert a.engine == first and b.engine == second
    assert a.dense.config.ann == "exact" and b.dense.config.ann == "auto" and b.dense.config.ann_candidates == 77
    for snap, root in ((a, roots["a"]), (b, roots["b"])):
        (held, _), *_ = snap.sparse_parts
        assert held.mapped and mapped.is_mapped(snap.dense.parts[0][0])
        found = copy_file(root, segment)
        assert (held.guard.device, held.guard.inode) == (found.st_dev, found.st_ino)  # mapped from its own copy
    assert not (mapped.cache_root(parts) / segment).exists()  # neither used the home's own cache/serving
    query = a.dense.vectors(np.array([3]))[0]
    assert np.array_equal(a.dense.top(query, 5)[0], b.dense.top(query, 5)[0])  # the same version, the same answer
    with pytest.raises(ValueError, match="serving copies"):
        a.with_engine(second)
    searched = a.with_engine(first.replace(ann="auto", ann_breadth=999))
    assert searched.engine.ann_breadth == 999 and a.engine.ann_breadth == first.ann_breadth  # a is unchanged
    a.close()
    b.close()
