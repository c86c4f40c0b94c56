"""The version format over shared segments (issue 13): a change writes what it changes, versions share the rest,
merges keep content, retention removes what no kept version names, and a worker switching versions loads only
the segments it has not loaded yet."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from livemem.engine import snapshot as reader
from livemem.engine.snapshot import load_snapshot
from livemem.ingest.build import build_version
from livemem.ingest.verify import compare_versions
from livemem.sources.config import load_sources
from livemem.version import connect
from livemem.version.segments import MAX_SEGMENTS, merge_plan
from livemem.version.store import IndexHome


def sources_file(tmp_path: Path, repo: Path) -> Path:
    path = tmp_path / "sources.yaml"
    path.write_text(f"sources:\n  - name: docs\n    repo: {repo}\n    collection: docs\n", encoding="utf-8")
    return path


def publish(config, home: IndexHome, embedder, retention: int = 50) -> str:
    result = build_version(config, home, embedder)
    assert result.staged, result.reason
    home.publish(result.version_id, result.base_version, retention=retention)
    return result.version_id


def segments(home: IndexHome, version: str) -> list[str]:
    return [e["id"] for e in home.manifest(version)["segments"]]


def size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


@pytest.fixture
def many_files(make_repo):
    files = {
        f"docs/page-{i:02d}.md": f"# Page {i}\n\n## Part\n\nText number {i} about heating help.\n" for i in range(30)
    }
    return make_repo(files=files)


def test_a_one_file_change_writes_one_small_segment_and_shares_the_rest(tmp_path, many_files, embedder) -> None:
    config = load_sources(sources_file(tmp_path, many_files.path))
    home = IndexHome(tmp_path / "index")
    first = publish(config, home, embedder)
    many_files.commit({"docs/page-07.md": "# Page 7\n\n## Part\n\nText number 7, edited: winter heating.\n"})
    second = publish(config, home, embedder)
    old, new = segments(home, first), segments(home, second)
    assert old[0] in new and len(new) == 2  # the first segment is shared, not copied
    (added,) = set(new) - set(old)
    added_meta = json.loads((home.root / "parts" / added / "segment.json").read_text())
    assert (added_meta["chunks"], added_meta["parents"]) == (1, 1)  # only the edited file's rows
    # the rows, vectors and postings it adds: one file's worth (a version's own directory holds its small tables)
    assert size(home.root / "parts" / added) < size(home.root / "parts" / old[0]) / 3
    snap = load_snapshot(home, second)
    assert snap.size == 30 and any("winter heating" in r["content"] for r in snap.rows)
    assert not any("Text number 7 about" in r["content"] for r in snap.rows)
    # membership is O(change): the segments held and the rows of them deleted (the edited file's old row), not one
    # row per chunk; attention holds only chunks that have some (none yet)
    con = connect(home.version_dir(second))
    try:
        held = con.execute("SELECT segment, chunks, parents FROM held_segments ORDER BY segment").fetchall()
        deleted = con.execute(
            "SELECT p.path FROM chunk_deletes d JOIN chunk_parts p ON p._seg = d.segment AND p._row = d.seg_row"
        ).fetchall()
        parents_deleted = con.execute("SELECT COUNT(*) FROM parent_deletes").fetchone()[0]
        attention_rows = con.execute("SELECT COUNT(*) FROM attention").fetchone()[0]
    finally:
        con.close()
    assert sorted(s for s, _, _ in held) == sorted(new) and {(c, p) for s, c, p in held if s == added} == {(1, 1)}
    assert deleted == [("docs/page-07.md",)] and parents_deleted == 1 and attention_rows == 0


def test_merges_keep_every_row_vector_and_score(tmp_path, many_files, embedder, monkeypatch) -> None:
    """Many small changes: the version never holds more than MAX_SEGMENTS segments, and it equals a from-scratch
    build of the same commit (rows, vectors, BM25 scores)."""
    config = load_sources(sources_file(tmp_path, many_files.path))
    home = IndexHome(tmp_path / "index")
    publish(config, home, embedder)
    for i in range(MAX_SEGMENTS + 3):
        many_files.commit({f"docs/page-{i:02d}.md": f"# Page {i}\n\n## Part\n\nEdit {i}: snow removal help.\n"})
        version = publish(config, home, embedder)
        assert len(segments(home, version)) <= MAX_SEGMENTS
    scratch = IndexHome(tmp_path / "scratch", cache_dir=home.cache_dir)
    reference = publish(config, scratch, embedder)
    comparison = compare_versions(home.version_dir(version), scratch.version_dir(reference))
    assert comparison.equal, comparison.lines()
    assert len(segments(scratch, reference)) == 1


def test_retention_removes_segments_no_kept_version_names(tmp_path, many_files, embedder) -> None:
    config = load_sources(sources_file(tmp_path, many_files.path))
    home = IndexHome(tmp_path / "index")
    first = publish(config, home, embedder, retention=1)
    first_segments = segments(home, first)
    many_files.commit({"docs/page-01.md": "# Page 1\n\nfirst edit\n"})
    second = publish(config, home, embedder, retention=1)
    (second_own,) = set(segments(home, second)) - set(first_segments)
    many_files.commit({"docs/page-01.md": "# Page 1\n\nsecond edit\n"})
    third = publish(config, home, embedder, retention=1)
    assert home.published_versions() == [third]
    on_disk = {p.name for p in (home.root / "parts").iterdir()}
    assert on_disk == set(segments(home, third))
    assert second_own not in on_disk  # went with the second version
    assert first_segments[0] in on_disk  # still named by the third version
    assert load_snapshot(home, third).size == 30


def test_a_worker_switching_versions_loads_only_new_segments(tmp_path, many_files, embedder, monkeypatch) -> None:
    config = load_sources(sources_file(tmp_path, many_files.path))
    home = IndexHome(tmp_path / "index")
    first = publish(config, home, embedder)
    before = load_snapshot(home, first)
    many_files.commit({"docs/page-03.md": "# Page 3\n\nchanged\n"})
    second = publish(config, home, embedder)
    loaded: list[str] = []
    original = reader.SEGMENTS.get

    def counting(parts, segment_id, serving_cache=None):
        if (str(parts), segment_id, str(serving_cache or "")) not in reader.SEGMENTS._loaded:
            loaded.append(segment_id)
        return original(parts, segment_id, serving_cache)

    monkeypatch.setattr(reader.SEGMENTS, "get", counting)
    after = load_snapshot(home, second)
    assert loaded == sorted(set(segments(home, second)) - set(segments(home, first)))
    shared = segments(home, first)[0]
    assert after.dense.parts[0][0] is before.dense.parts[0][0]  # the same vectors in memory, not a copy
    assert shared in after.segments
    query = embedder.encode_one("heating help")
    scores = after.dense @ query
    assert scores.shape == (after.size,) and np.isclose(scores.max(), 1.0, atol=0.5)
    # chunk id -> row through the shared segments' own maps: the edited chunk's new row, never its deleted old one
    assert before.row_of.keys() != after.row_of.keys() or before.ids != after.ids
    for snap in (before, after):
        assert len(snap.row_of) == snap.size and all(snap.row_of[c] == i for i, c in enumerate(snap.ids))
    old_ids = set(before.ids) - set(after.ids)
    assert old_ids and not any(c in after.row_of for c in old_ids) and after.row_of.get(next(iter(old_ids))) is None
    edited = next(c for c in after.ids if c not in set(before.ids))
    assert after.rows[after.row_of[edited]]["content"].endswith("changed")
    assert segment_rows_built_once(reader, after)


def segment_rows_built_once(reader_module, snap) -> bool:
    """The shared segment's id map is the one object both versions read (built once per segment per process)."""
    shared = snap.row_of.parts[0][0]
    return shared is reader_module.segment_rows(
        reader_module.SEGMENTS.get(snap.path.parent.parent / "parts", snap.segments[0])
    )


def test_chunk_ids_held_twice_are_counted_across_and_within_segments() -> None:
    """``RowOf.repeated``: a version holding one chunk id in two segments (or twice in one) is refused at load
    ("holds N chunk ids twice"); rows the version does not hold (deleted) never count."""
    from livemem.engine.snapshot import RowOf

    big = ({"a": 0, "b": 1, "c": 2}, np.array([0, 1, -1]))  # row c deleted
    small = ({"c": 0, "d": 1}, np.array([2, 3]))
    assert RowOf([big, small], ["a", "b", "c", "d"]).repeated() == 0
    again = ({"b": 0}, np.array([4]))
    assert RowOf([big, small, again], ["a", "b", "c", "d", "b"]).repeated() == 1
    lookups = RowOf([big, small], ["a", "b", "c", "d"])
    assert lookups["c"] == 2 and "c" in lookups and lookups.get("zz") is None and list(lookups) == ["a", "b", "c", "d"]
    within = ({"a": 1}, np.array([0, 1]))  # two rows, one id: the map is smaller than the segment
    assert RowOf([within], ["a", "a"]).repeated() == 1


def test_merge_plan() -> None:
    sizes = {f"s{i}": 100 for i in range(MAX_SEGMENTS + 2)}
    live = dict(sizes)
    plan = merge_plan(live, sizes)
    assert len(live) - len(plan) + 1 <= MAX_SEGMENTS and len(plan) >= 2
    assert merge_plan({"a": 100, "b": 10}, {"a": 100, "b": 10}) == []  # few segments, all live: nothing
    assert merge_plan({"a": 40}, {"a": 100}) == ["a"]  # mostly deleted: rewritten
    assert merge_plan({"a": 100}, {"a": 100}) == []


def test_chunk_ids_held_twice_across_segments_are_found_once_per_pair_of_segments() -> None:
    """``held_twice``: the rows two segments share are found once per pair and process (a switch to a version
    that adds a small segment looks up only that segment's ids; at 2M chunks in two 1M segments the lookup of
    one's ids in the other's map on every switch took 1.8 s); held rows count, deleted ones do not."""
    from types import SimpleNamespace

    from livemem.engine.snapshot import RowOf, held_twice

    def segment(name: str, ids: list[str]) -> SimpleNamespace:
        return SimpleNamespace(id=name, size=len(ids), chunk_ids=np.array(ids, dtype=object), derived={})

    big1, big2 = segment("s1", ["a", "b", "c"]), segment("s2", ["d", "e", "c"])
    parts = [(big1, np.array([0, 1, 2])), (big2, np.array([3, 4, -1]))]  # c held in s1 only
    row_of = RowOf([(reader.segment_rows(s), p) for s, p in parts], ["a", "b", "c", "d", "e"])
    assert held_twice(parts, row_of) == 0
    cached = big1.derived["shared_rows"]["s2"]  # the smaller (then by id) keeps the pair's shared rows
    assert cached[0].tolist() == [2] and cached[1].tolist() == [2]
    both = [(big1, np.array([0, 1, 2])), (big2, np.array([3, 4, 5]))]  # c held in both
    assert held_twice(both, row_of) == 1 and big1.derived["shared_rows"]["s2"] is cached
    small = segment("s3", ["e"])
    three = [*both, (small, np.array([6]))]
    assert held_twice(three, row_of) == 2 and set(small.derived["shared_rows"]) == {"s1", "s2"}
