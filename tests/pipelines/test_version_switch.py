"""A worker's version switch copies nothing per row (issue 38: a switch at 2M chunks within 1 s).

``load_snapshot`` of a version reads its segments' own arrays: a version holding a segment whole shares that
segment's columns (no copy per version), a version with deleted rows gathers a column only when it is first read,
and either way every row reads the values the version's tables hold for its chunk."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from livemem.engine import snapshot as reader
from livemem.engine.snapshot import load_snapshot, parse_time
from livemem.sources.config import load_sources
from livemem.version import connect
from livemem.version.store import IndexHome

pytestmark = pytest.mark.pipelines

TEXT_COLUMNS = ("source", "collection", "access", "path", "type", "seal_state", "parent_id")


def publish(config, home: IndexHome, embedder) -> str:
    from livemem.ingest.build import build_version

    result = build_version(config, home, embedder)
    assert result.staged, result.reason
    home.publish(result.version_id, result.base_version, retention=10)
    return result.version_id


def sources(tmp_path: Path, repo: Path, extra: bool) -> Path:
    path = tmp_path / "sources.yaml"
    text = f"sources:\n  - name: docs\n    repo: {repo}\n    subdir: docs\n    collection: docs\n"
    if extra:  # a second collection, internal, of one file
        text += f"  - name: notes\n    repo: {repo}\n    subdir: notes\n    collection: notes\n    access: internal\n"
    path.write_text(text, encoding="utf-8")
    return path


def table_rows(home: IndexHome, version: str) -> dict[str, dict]:
    """Each chunk's columns as the version's tables hold them (the oracle: not read through the segments)."""
    con = connect(home.version_dir(version))
    try:
        names = (*TEXT_COLUMNS, "domain", "updated_at")
        found = con.execute(f"SELECT chunk_id, {', '.join(names)} FROM chunks").fetchall()
    finally:
        con.close()
    return {r[0]: dict(zip(names, r[1:], strict=True)) for r in found}


def test_a_switch_shares_whole_segments_and_a_version_with_deletions_reads_every_row_right(
    tmp_path, make_repo, embedder
) -> None:
    files = {f"docs/page-{i:02d}.md": f"# Page {i}\n\nText number {i} about heating help.\n" for i in range(20)}
    files["notes/only.md"] = "# Notes\n\nThe zebra protocol.\n"
    repo = make_repo(files=files)
    home = IndexHome(tmp_path / "index")
    first = publish(load_sources(sources(tmp_path, repo.path, extra=True)), home, embedder)
    repo.commit({"docs/page-07.md": "# Page 7\n\nText number 7, edited: winter heating.\n"})
    second = publish(load_sources(sources(tmp_path, repo.path, extra=False)), home, embedder)  # notes dropped

    before = load_snapshot(home, first)
    (segment,) = (reader.SEGMENTS.get(reader.parts_dir(before.path), s) for s in before.segments)
    own = reader._segment_columns(segment)
    for name in reader._COLUMN_KINDS:  # held whole: the segment's arrays themselves, shared and read-only
        assert before.columns[name] is own[name] and not before.columns[name].flags.writeable, name
    assert before.ids.parts[0][0] is segment.chunk_ids  # the ids too: no list of every chunk id per version

    after = load_snapshot(home, second)  # while ``before`` is held, as a worker switches
    assert len(after.segments) == 2 and segment.id in after.segments  # the old segment, less its deleted rows
    assert before.access_of == {"docs": "public", "notes": "internal"}
    assert before.access_levels == frozenset({"public", "internal"})
    assert after.access_of == {"docs": "public"}  # the dropped collection's rows are deleted, not held
    assert after.collections_for(frozenset({"internal"})) == [] and after.access_levels == frozenset({"public"})
    for snap, version in ((before, first), (after, second)):
        expected = table_rows(home, version)
        assert snap.size == len(expected) and sorted(snap.ids) == sorted(expected)
        assert list(snap.ids) == [snap.ids[i] for i in range(snap.size)] == snap.ids[:] == snap.ids
        assert snap.ids[-1] == snap.ids[snap.size - 1] and snap.ids[np.int64(0)] == snap.ids[0]
        for row, chunk_id in enumerate(snap.ids):
            assert snap.row_of[chunk_id] == row
            want, got = expected[chunk_id], {name: snap.columns[name][row] for name in snap.columns}
            assert {name: got[name] for name in TEXT_COLUMNS} == {name: want[name] for name in TEXT_COLUMNS}
            domain = json.loads(want["domain"]) if want["domain"] else {}
            assert all(got[name] == domain.get(name) for name in reader.DOMAIN_FIELDS)
            assert got["updated"] == parse_time(want["updated_at"]) and np.isnan(got["document_date"])
            assert got["attention"] == 0.0 and np.isnan(got["breath"])
    edited = next(c for c in after.ids if c not in set(before.ids))
    assert after.columns["path"][after.row_of[edited]].endswith("page-07.md")  # the edited file's new chunk, in its row
    assert not any(p.endswith("only.md") for p in after.columns["path"])
    assert before.ids != after.ids and len(after.columns) == len(reader._COLUMN_KINDS) + 2
    for snap in (before, after):  # a graph's segment rows -> rows of the part: the first part's is not built again
        assert snap.dense.inverse(0) is snap.sparse_parts[0][1]
        for part, (vectors, held) in enumerate(snap.dense.parts):
            expected = np.full(vectors.shape[0], -1)
            expected[held] = np.arange(held.size)
            assert snap.dense.inverse(part).tolist() == expected.tolist()


def test_chunk_ids_compare_and_index_as_the_list_they_stand_for() -> None:
    ids = np.array(["a", "b", "c", "d"], dtype=object)
    more = np.array(["e", "f"], dtype=object)
    held = reader.ChunkIds([(ids, np.array([0, 2, 3])), (more, None)])
    assert len(held) == 5 and list(held) == ["a", "c", "d", "e", "f"] == held and held != ["a", "c", "d", "e"]
    assert held[1] == "c" and held[-1] == "f" and held[3] == "e" and held[1:3] == ["c", "d"]
    with pytest.raises(IndexError):
        held[5]
    assert reader.ChunkIds([]) == [] and not reader.ChunkIds([])


def test_a_column_is_gathered_once_at_its_first_read_however_many_requests_ask_at_once() -> None:
    big = {"path": np.array(["a", "b", "c", "d"], dtype=object), "updated": np.array([1.0, 2.0, 3.0, 4.0])}
    small = {"path": np.array(["e"], dtype=object), "updated": np.array([5.0])}
    columns = reader.Columns([(big, np.array([0, 2, 3])), (small, None)], 4)
    barrier = threading.Barrier(8)
    seen: list[np.ndarray] = []

    def read() -> None:
        barrier.wait()
        seen.append(columns["path"])

    threads = [threading.Thread(target=read) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(found is seen[0] for found in seen) and seen[0].tolist() == ["a", "c", "d", "e"]
    assert columns["updated"].tolist() == [1.0, 3.0, 4.0, 5.0] and columns.get("breath") is None
    columns["breath"] = np.full(4, np.nan)
    assert "breath" in columns and "attention" not in columns and list(columns)[-1] == "breath"
    whole = reader.Columns([(big, None)], 4)
    assert whole["path"] is big["path"]  # one segment held whole: its own array
    assert reader.Columns([], 0)["updated"].dtype == np.float64 and reader.Columns([], 0)["path"].dtype == object
