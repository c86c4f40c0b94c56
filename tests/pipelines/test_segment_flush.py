"""Builds in bounded memory (issue 38): a build writes a segment each time it holds ``segment_rows`` chunk rows, so
what it holds at once is one segment's rows, not the corpus's. The versions it writes hold the same rows, vectors
and answers as a build written as one segment; merges never write a segment past the limit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from livemem.ingest.build import build_version
from livemem.ingest.segments_writer import merge_groups
from livemem.ingest.verify import compare_versions
from livemem.settings import BuildSettings
from livemem.sources.config import load_sources
from livemem.version import connect
from livemem.version.segments import MAX_SEGMENTS, merge_plan
from livemem.version.store import IndexHome

TOPICS = ("heating help", "food pantry hours", "rent assistance", "clinic for children", "job training")


@pytest.fixture
def corpus(make_repo):
    files = {
        f"docs/{topic.replace(' ', '-')}-{i:02d}.md": f"# {topic.title()} {i}\n\n## Where\n\nIn county {i}, {topic}.\n\n"
        f"## When\n\nOpen weekdays; call {i:03d} for {topic}.\n"
        for i in range(12)
        for topic in TOPICS
    }
    return make_repo(files=files)


def build(tmp_path: Path, repo, embedder, name: str, **settings) -> tuple[IndexHome, str]:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"sources:\n  - name: docs\n    repo: {repo.path}\n    collection: docs\n", encoding="utf-8")
    home = IndexHome(tmp_path / name)
    result = build_version(load_sources(path), home, embedder, settings=BuildSettings(**settings))
    assert result.staged, result.reason
    home.publish(result.version_id, result.base_version, retention=50)
    return home, result.version_id


def held(home: IndexHome, version: str) -> list[tuple[str, int, int]]:
    con = connect(home.version_dir(version))
    try:
        return con.execute("SELECT segment, chunks, parents FROM held_segments ORDER BY segment").fetchall()
    finally:
        con.close()


def test_a_build_flushes_segments_of_at_most_the_limit_and_holds_the_same_version(
    tmp_path, corpus, embedder, monkeypatch
) -> None:
    monkeypatch.setattr("livemem.ingest.read.CHUNK_BATCH_FILES", 4)  # flushes fall between batches of 4 files
    whole, whole_v = build(tmp_path, corpus, embedder, "whole")
    # worker processes reading ahead one batch each while the build writes a segment
    monkeypatch.setattr("livemem.ingest.read.POOL_MIN_FILES", 10)
    monkeypatch.setattr("livemem.ingest.read.READ_AHEAD", 1)
    split, split_v = build(tmp_path, corpus, embedder, "split", segment_rows=25, workers=2)
    (one,) = held(whole, whole_v)
    pieces = held(split, split_v)
    assert len(pieces) == MAX_SEGMENTS or len(pieces) >= -(-one[1] // 33)  # several segments, none merged back
    assert sum(c for _, c, _ in pieces) == one[1] and sum(p for _, _, p in pieces) == one[2] == 60
    for segment, chunks, _ in pieces:
        meta = json.loads((split.root / "parts" / segment / "segment.json").read_text())
        # a segment is flushed at the first batch of files that reaches the limit: at most limit + one batch
        assert meta["chunks"] == chunks and chunks < 25 + 4 * 3
    # the same rows, vectors, postings and manifest as one segment's version: split is how, not what
    comparison = compare_versions(split.version_dir(split_v), whole.version_dir(whole_v))
    assert comparison.equal, (dict(comparison.differences), comparison.general)
    # and the same answers over HTTP
    answers = []
    for home in (whole, split):
        from serving.app import create_app
        from serving.settings import Settings

        with TestClient(create_app(Settings(index_dir=home.root, warm_up=False), embedder)) as client:
            body = client.post("/query", json={"query": "food pantry hours in county 7", "top_k": 5}).json()
        answers.append([(r["chunk_id"], round(r["score"], 5)) for r in body["results"]])
    assert answers[0] == answers[1] and answers[0]


def test_an_incremental_change_after_a_split_build_equals_a_build_from_scratch(
    tmp_path, corpus, embedder, monkeypatch
) -> None:
    monkeypatch.setattr("livemem.ingest.read.CHUNK_BATCH_FILES", 4)
    home, first = build(tmp_path, corpus, embedder, "split", segment_rows=25)
    corpus.commit(
        {"docs/rent-assistance-03.md": "# Rent Assistance 3\n\n## Where\n\nMoved: Fayette County, rent help.\n"},
        delete=["docs/job-training-05.md"],
    )
    home2, second = build(tmp_path, corpus, embedder, "split", segment_rows=25)
    assert home2.root == home.root and second != first
    scratch, scratch_v = build(tmp_path, corpus, embedder, "scratch")
    comparison = compare_versions(home.version_dir(second), scratch.version_dir(scratch_v))
    assert comparison.equal, (dict(comparison.differences), comparison.general)
    # the change wrote one small segment and kept naming the split build's segments it did not touch
    before, after = {s for s, _, _ in held(home, first)}, {s for s, _, _ in held(home, second)}
    assert len(before & after) >= len(before) - 2 and len(after - before) == 1


def test_merges_leave_full_segments_alone_and_write_none_past_the_limit() -> None:
    # eleven segments of 600 rows with a limit of 1,000: each is full (at least half the limit), none merged
    full = {f"f{i}": 600 for i in range(MAX_SEGMENTS + 3)}
    assert merge_plan(full, full, max_rows=1000) == []
    # without a limit the smallest are merged until eight remain (as before)
    assert len(merge_plan(full, full)) == 4
    # small segments beside full ones are still merged while there are too many
    mixed = {**{f"f{i}": 600 for i in range(6)}, **{f"s{i}": 10 for i in range(5)}}
    plan = merge_plan(mixed, mixed, max_rows=1000)
    assert plan and all(s.startswith("s") for s in plan) and 6 + 5 - len(plan) + 1 <= MAX_SEGMENTS
    # mostly deleted segments are rewritten in groups of at most the limit
    assert merge_groups(["a", "b", "c"], {"a": 700, "b": 400, "c": 200}, 1000) == [["a"], ["b", "c"]]
    assert merge_groups(["a", "b"], {"a": 1500, "b": 10}, 1000) == [["a"], ["b"]]
    assert merge_groups(["a", "b"], {"a": 1500, "b": 10}, None) == [["a", "b"]]


def test_segment_rows_is_a_build_setting_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("LIVEMEM_SEGMENT_ROWS", "250000")
    assert BuildSettings.from_env().segment_rows == 250_000
    monkeypatch.setenv("LIVEMEM_SEGMENT_ROWS", "0")
    with pytest.raises(Exception, match="LIVEMEM_SEGMENT_ROWS"):
        BuildSettings.from_env()


def test_a_build_failing_after_a_flush_publishes_nothing_and_its_segments_go_at_the_next_publish(
    tmp_path, corpus, embedder, monkeypatch
) -> None:
    """A segment flushed by a build that fails later is complete but named by no version: the published version
    answers as before, the next build publishes, and its publish removes what the failed build left."""
    from livemem.engine.snapshot import load_snapshot
    from livemem.ingest.flush import SegmentFlusher

    monkeypatch.setattr("livemem.ingest.read.CHUNK_BATCH_FILES", 4)
    home, first = build(tmp_path, corpus, embedder, "home", segment_rows=25)
    corpus.commit({f"docs/heating-help-{i:02d}.md": f"# Heating {i}\n\n## Where\n\nEdited: furnace repair {i}.\n"
                   for i in range(12)} | {f"docs/rent-assistance-{i:02d}.md": f"# Rent {i}\n\nEdited: deposits {i}.\n"
                   for i in range(12)})  # fmt: skip
    flush, flushed = SegmentFlusher.flush, []

    def failing(self) -> None:
        if self._rows and flushed:
            raise OSError("No space left on device (injected)")
        flush(self)
        flushed.extend(self.written)

    monkeypatch.setattr(SegmentFlusher, "flush", failing)
    path = tmp_path / "home.yaml"
    with pytest.raises(OSError, match="injected"):
        build_version(load_sources(path), home, embedder, settings=BuildSettings(segment_rows=10))
    parts = {p.name for p in (home.root / "parts").iterdir() if p.name.startswith("seg-")}
    assert home.current() == first and flushed and set(flushed) <= parts  # complete, named by no version
    assert not set(flushed) & {s for s, _, _ in held(home, first)}
    assert load_snapshot(home, first).size == sum(c for _, c, _ in held(home, first))
    monkeypatch.setattr(SegmentFlusher, "flush", flush)
    _, second = build(tmp_path, corpus, embedder, "home", segment_rows=25)
    left = {p.name for p in (home.root / "parts").iterdir() if p.name.startswith("seg-")}
    assert left == {s for s, _, _ in held(home, first)} | {s for s, _, _ in held(home, second)}
    assert any("furnace repair 3" in r["content"] for r in load_snapshot(home, second).rows)
