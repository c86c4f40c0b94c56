"""Serving copies (issue 13: workers share memory): the first worker to load a segment writes its rows, vectors and
postings as plain arrays that every worker maps; a worker that finds the copy never reads the segment's files again;
the copy answers exactly what the version's tables hold; a directory that cannot be written falls back to private
memory; a damaged copy is written again; retention removes copies with their segments."""

from __future__ import annotations

import pytest

from livemem.engine import segments
from livemem.engine import snapshot as reader
from livemem.engine.snapshot import load_snapshot
from livemem.index import dense as dense_module
from livemem.index.dense import first_stage_kernel
from livemem.ingest.build import build_version
from livemem.query.retrieval import Retriever
from livemem.query.types import Query
from livemem.settings import EngineConfig
from livemem.sources.config import load_sources
from livemem.version import connect, mapped
from livemem.version.store import IndexHome


@pytest.fixture
def home_with_two_versions(tmp_path, make_repo, embedder):
    files = {
        f"docs/page-{i:02d}.md": f"# Page {i}\n\n## Part\n\nHeating help number {i} in Fayette.\n" for i in range(12)
    }
    files["docs/unicode.md"] = "# Café señor\n\nÜmlauts, emoji 🚒 and a NUL-free oddity: \u2028 line separator.\n"
    repo = make_repo(files=files)
    sources = tmp_path / "sources.yaml"
    sources.write_text(f"sources:\n  - name: docs\n    repo: {repo.path}\n    collection: docs\n", encoding="utf-8")
    config = load_sources(sources)
    home = IndexHome(tmp_path / "index")
    versions = []
    for edit in (None, {"docs/page-03.md": "# Page 3\n\nchanged: winter heating.\n"}):
        if edit:
            repo.commit(edit)
        result = build_version(config, home, embedder)
        home.publish(result.version_id, result.base_version, retention=1)
        versions.append(result.version_id)
    home.test_repo, home.test_config = repo, config  # for a later build in a test
    return home, versions


def fresh_process(monkeypatch) -> None:
    """Forget the segments this process loaded, as a new worker would start."""
    monkeypatch.setattr(reader, "SEGMENTS", segments.SegmentCache())


def sql_rows(home: IndexHome, version: str) -> list[dict]:
    con = connect(home.version_dir(version))
    try:
        frame = con.execute("SELECT * FROM chunks").df()
    finally:
        con.close()
    return sorted(({k: (None if v != v else v) for k, v in r.items()} for r in frame.to_dict("records")),
                  key=lambda r: r["chunk_id"])  # fmt: skip


def test_rows_vectors_and_postings_come_from_mapped_copies_equal_to_the_version(home_with_two_versions, monkeypatch):
    home, (_, version) = home_with_two_versions
    fresh_process(monkeypatch)
    snap = load_snapshot(home, version)
    root = mapped.cache_root(home.root / "parts")
    assert sorted(p.name for p in root.iterdir()) == sorted(snap.segments)
    kernel = first_stage_kernel()
    for dense, _ in snap.dense.parts:
        assert mapped.is_mapped(dense)
        packed = dense_module.packed(dense, kernel)  # the int8 first stage scans the mapped codes, no private copy
        assert kernel.reads_int8 and packed.usable
        assert all(mapped.is_mapped(block.codes) for _, _, block in packed.blocks)
    rows = sorted((snap.rows[i] for i in range(snap.size)), key=lambda r: r["chunk_id"])
    assert rows == sql_rows(home, version)  # every column of every row, unicode included
    assert [r["chunk_id"] for r in (snap.rows[i] for i in range(snap.size))] == snap.ids


def sql_parents(home: IndexHome, version: str) -> dict[str, dict]:
    con = connect(home.version_dir(version))
    try:
        rows = con.execute(f"SELECT {', '.join(reader.PARENT_FIELDS)} FROM parents").fetchall()
    finally:
        con.close()
    return {r[0]: dict(zip(reader.PARENT_FIELDS, r, strict=True)) for r in rows}


def test_parent_documents_come_from_the_copies_equal_to_the_version(home_with_two_versions, monkeypatch):
    """``return: documents`` answers with whole parent files: read from the serving copies (a lookup in the
    Parquet file decoded its whole text column: 13 ms a request on SciFact), each parent's live row (the second
    version replaced page 3: its first text is deleted, not served), equal to the version's tables."""
    home, (_, version) = home_with_two_versions
    fresh_process(monkeypatch)
    snap = load_snapshot(home, version)
    expected = sql_parents(home, version)
    got = snap.parents([*expected, "no-such-parent"])
    assert snap._parents  # from the copies, not the tables
    assert got == expected and all(type(p["truncated"]) is bool for p in got.values())
    page3 = [p["content"] for p in got.values() if p["path"] == "docs/page-03.md"]
    assert page3 == ["# Page 3\n\nchanged: winter heating.\n"]  # its first text is held, deleted, not served
    assert any("🚒" in p["content"] for p in got.values())


def test_a_new_worker_maps_the_copy_without_reading_the_segment_files(home_with_two_versions, embedder, monkeypatch):
    home, (_, version) = home_with_two_versions
    fresh_process(monkeypatch)
    first = load_snapshot(home, version)
    query = Query(text="winter heating", top_k=5, mode="hybrid")
    expected = Retriever(embedder).search(first, query, first.collections_for(frozenset({"public"})))

    fresh_process(monkeypatch)

    def refuse(*args):
        raise AssertionError("the segment files were read again")

    monkeypatch.setattr(segments, "_read_verified", refuse)
    second = load_snapshot(home, version)
    assert all(reader.SEGMENTS.get(home.root / "parts", s).mapped for s in second.segments)
    got = Retriever(embedder).search(second, query, second.collections_for(frozenset({"public"})))
    assert [(h.row, h.score) for h in got.chunks] == [(h.row, h.score) for h in expected.chunks]


def test_an_unwritable_cache_falls_back_to_private_memory(home_with_two_versions, embedder, monkeypatch):
    home, (_, version) = home_with_two_versions
    blocker = home.root / "not-a-directory"
    blocker.write_text("a file where the cache directory would be\n")
    engine = EngineConfig.defaults(serving_cache=blocker / "copies")  # LIVEMEM_SERVING_CACHE, passed down
    home = IndexHome(home.root, engine=engine)
    fresh_process(monkeypatch)
    snap = load_snapshot(home, version)
    assert not any(reader.SEGMENTS.get(home.root / "parts", s, engine.serving_cache).mapped for s in snap.segments)
    assert not any(mapped.is_mapped(dense) for dense, _ in snap.dense.parts)
    assert sorted((snap.rows[i] for i in range(snap.size)), key=lambda r: r["chunk_id"]) == sql_rows(home, version)
    result = Retriever(embedder).search(
        snap, Query(text="winter heating", top_k=3, mode="hybrid"), snap.collections_for(frozenset({"public"}))
    )
    assert result.chunks and "changed: winter heating" in snap.rows[result.chunks[0].row]["content"]
    assert snap.parents(list(sql_parents(home, version))) == sql_parents(home, version)  # from private memory


def test_a_damaged_copy_is_written_again(home_with_two_versions, monkeypatch):
    home, (_, version) = home_with_two_versions
    fresh_process(monkeypatch)
    load_snapshot(home, version)
    root = mapped.cache_root(home.root / "parts")
    segment = home.manifest(version)["segments"][0]["id"]
    with open(root / segment / mapped.ARRAYS, "r+b") as fh:
        fh.truncate(100)
    fresh_process(monkeypatch)
    snap = load_snapshot(home, version)
    assert (root / segment / mapped.ARRAYS).stat().st_size > 100
    assert sorted((snap.rows[i] for i in range(snap.size)), key=lambda r: r["chunk_id"]) == sql_rows(home, version)


def test_retention_removes_the_copies_of_removed_segments(home_with_two_versions, embedder, monkeypatch):
    home, (_, second) = home_with_two_versions
    fresh_process(monkeypatch)
    load_snapshot(home, second)
    root = mapped.cache_root(home.root / "parts")
    copies = {p.name for p in root.iterdir()}
    home.test_repo.commit({"docs/page-03.md": "# Page 3\n\nrewritten again\n"})  # the second's own segment: page 3 only
    third = build_version(home.test_config, home, embedder)
    home.publish(third.version_id, third.base_version, retention=1)  # retention removes the second's own segment
    parts = {p.name for p in (home.root / "parts").iterdir()}
    assert copies - parts, "the change should have dropped a segment"
    assert {p.name for p in root.iterdir()} <= parts  # its copy went with it


def test_workers_writing_the_same_copy_at_once_all_get_it_complete(home_with_two_versions):
    """Several workers starting together each write the copy of the same segment: one rename wins, the others keep
    theirs out of the way (no error, no temporary directory left), and every one maps a complete copy."""
    from concurrent.futures import ThreadPoolExecutor

    home, (_, version) = home_with_two_versions
    parts = home.root / "parts"
    segment = max(home.manifest(version)["segments"], key=lambda e: e["chunks"])["id"]
    root = mapped.cache_root(parts)
    with ThreadPoolExecutor(6) as pool:
        loaded = list(pool.map(lambda _: segments.load_segment(parts, segment), range(6)))
    assert all(s.mapped for s in loaded)
    contents = [[s.table.row(i)["content"] for i in range(s.size)] for s in loaded]
    assert all(c == contents[0] for c in contents) and contents[0]
    assert sorted(p.name for p in root.iterdir()) == [segment]  # one copy, nothing temporary left behind


def test_a_worker_holds_one_file_descriptor_per_mapped_segment(home_with_two_versions, monkeypatch):
    """A mapping keeps a file descriptor: the copy is one file per segment, so loading versions again and again
    (each load in a fresh process cache) does not run a worker out of descriptors (a .npy file per array did:
    tens per segment, and select() failed past 1,024)."""
    import os

    home, (_, version) = home_with_two_versions
    fresh_process(monkeypatch)
    load_snapshot(home, version)  # the copies exist from here on
    held = []
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(5):
        fresh_process(monkeypatch)
        held.append(load_snapshot(home, version))
    added = len(os.listdir("/proc/self/fd")) - before
    segments_loaded = 5 * len(held[0].segments)
    assert added <= segments_loaded + 5 * 2, (added, segments_loaded)  # + each snapshot's tables.duckdb


def test_a_copy_left_half_written_by_a_killed_worker_is_never_used_and_is_cleaned_up(
    home_with_two_versions, monkeypatch
):
    """A worker killed while writing leaves only a temporary directory (the copy appears by one rename): the next
    worker writes its own copy and maps that; a temporary directory older than an hour is removed by the next load,
    a recent one (a worker still writing) is left alone."""
    import os
    import time

    home, (_, version) = home_with_two_versions
    root = mapped.cache_root(home.root / "parts")
    segment = home.manifest(version)["segments"][0]["id"]
    root.mkdir(parents=True, exist_ok=True)
    dead, writing = root / f".tmp-{segment}-dead", root / f".tmp-{segment}-writing"
    for tmp in (dead, writing):
        tmp.mkdir()
        (tmp / mapped.ARRAYS).write_bytes(b"\0" * 10)  # what a killed writer had written so far
    old = time.time() - mapped.STALE_TMP_S - 60
    os.utime(dead, (old, old))
    fresh_process(monkeypatch)
    snap = load_snapshot(home, version)
    assert sorted((snap.rows[i] for i in range(snap.size)), key=lambda r: r["chunk_id"]) == sql_rows(home, version)
    assert not dead.exists() and writing.exists()
    assert (root / segment / mapped.META).is_file()
