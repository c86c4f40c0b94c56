"""Building versions from real git repositories: provenance, seal state, incremental updates, publish."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from livemem.engine.snapshot import IndexUnavailable, load_snapshot
from livemem.errors import PublishConflict, SourceError
from livemem.index import records
from livemem.ingest import checks
from livemem.ingest.build import build_version
from livemem.schemas import errors_for
from livemem.sources.config import load_sources
from livemem.version import connect, schema
from livemem.version.store import IndexHome
from livemem.version.vectors import close_chroma, open_chroma

CHARTER = "# Charter\n\n## Purpose\n\nWe keep the memory of the valley.\n\n## Roles\n\nStewards tend the index.\n"
CONSTITUTION = "# Constitution\n\nSeal: ∞Δ∞\n\n## Article I\n\nSealed records never decay.\n"
GUIDE = "# Guide\n\n## SNAP\n\nFood help in Oak Hill.\n\n## WIC\n\nNutrition for infants.\n"


def sources_file(tmp_path: Path, repo: Path, extra: str = "", index: str = "") -> Path:
    path = tmp_path / "sources.yaml"
    path.write_text(
        f"index:\n  retention: 2\n  vector_store: chroma\n{index}"
        "sources:\n"
        f"  - name: docs\n    repo: {repo}\n    collection: docs\n    sealed: ['policy/*.md']\n" + extra,
        encoding="utf-8",
    )
    return path


def rows(home: IndexHome, sql: str, params: list | None = None) -> list[tuple]:
    con = connect(home.version_dir(home.current()))
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def build_and_publish(config, home: IndexHome, embedder):
    result = build_version(config, home, embedder)
    if result.staged:
        home.publish(result.version_id, result.base_version, config.retention)
    return result


def chroma_ids(home: IndexHome, collection: str) -> set[str]:
    client = open_chroma(home.version_dir(home.current()) / "chroma")
    try:
        return set(client.get_collection(collection).get(include=[])["ids"])
    finally:
        close_chroma(client)


@pytest.fixture
def repo(make_repo):
    return make_repo(
        files={
            "CHARTER.md": CHARTER,
            "CONSTITUTION.md": CONSTITUTION,
            "guides/fayette.md": GUIDE,
            "policy/retention.md": "# Retention\n\nKeep five versions.\n",
            "src/tool.py": "def main():\n    return 42\n",
            "logo.png": b"\x89PNG\r\n\x1a\n\x00\x00binary",
            "latin1.txt": "caf\xe9 au lait".encode("latin-1"),
        }
    )


def test_full_build_records_provenance_and_seal_state(tmp_path: Path, repo, embedder) -> None:
    config = load_sources(sources_file(tmp_path, repo.path))
    home = IndexHome(tmp_path / "index")
    result = build_and_publish(config, home, embedder)
    assert result.staged and home.current() == result.version_id
    stats = result.sources["docs"]
    assert stats.files_new == 7 and dict(stats.skipped) == {"binary": 1, "non_utf8": 1}

    recs = checks.read_records(home.version_dir(home.current()))
    assert all(not errors_for("chunk", r) for r in recs)
    by_path: dict[str, list[dict]] = {}
    for r in recs:
        by_path.setdefault(r["provenance"]["path"], []).append(r)
    assert {r["seal_state"] for r in by_path["CONSTITUTION.md"]} == {"SEALED"}  # marker
    assert {r["seal_state"] for r in by_path["policy/retention.md"]} == {"SEALED"}  # sealed glob
    assert {r["seal_state"] for r in by_path["CHARTER.md"]} == {"OPEN"}
    charter = sorted(by_path["CHARTER.md"], key=lambda r: r["metadata"]["chunk_index"])
    assert [r["metadata"]["heading_path"] for r in charter] == [["Charter", "Purpose"], ["Charter", "Roles"]]
    assert {r["provenance"]["commit"] for r in recs} == {repo.head()}
    assert charter[0]["metadata"]["type"] == "markdown"
    assert by_path["src/tool.py"][0]["metadata"]["type"] == "code"

    manifest = home.current_manifest()
    assert not errors_for("manifest", manifest)
    assert manifest["sources"]["docs"]["head_commit"] == repo.head()
    assert manifest["sources"]["docs"]["skipped_files"] == {"binary": 1, "non_utf8": 1}
    assert manifest["total_chunks"] == len(recs) and manifest["sealed_chunks"] == 3
    assert manifest["collections"] == {"docs": {"access": "public", "chunks": len(recs)}}
    assert chroma_ids(home, "docs") == {r["chunk_id"] for r in recs}
    assert result.embeddings_computed == len(recs)
    # the version holds exactly the chunk step's declared tables and views, under the declared layout number
    assert manifest["layout_version"] == schema.LAYOUT_VERSION
    names = rows(home, "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'")
    assert sorted(n for (n,) in names) == sorted(schema.owned_by(schema.CHUNKS))


def test_incremental_update_touches_only_changed_files(tmp_path: Path, repo, embedder) -> None:
    config = load_sources(sources_file(tmp_path, repo.path))
    home = IndexHome(tmp_path / "index")
    first = build_and_publish(config, home, embedder)
    before = {cid: (path, commit) for cid, path, commit in rows(home, "SELECT chunk_id, path, commit_sha FROM chunks")}
    created = dict(rows(home, "SELECT path, created_at FROM parents"))

    edit = repo.commit(
        {"guides/fayette.md": GUIDE.replace("Nutrition for infants.", "Nutrition for infants and mothers.")}
    )
    second = build_and_publish(config, home, embedder)
    assert second.staged and second.base_version == first.version_id
    stats = second.sources["docs"]
    assert (stats.files_new, stats.files_changed, stats.files_unchanged, stats.files_deleted) == (0, 1, 6, 0)
    assert (stats.chunks_new, stats.chunks_changed, stats.chunks_deleted) == (0, 1, 1)
    assert second.embeddings_computed == 1  # only the edited section is new text

    after = {cid: (path, commit) for cid, path, commit in rows(home, "SELECT chunk_id, path, commit_sha FROM chunks")}
    kept = set(before) & set(after)
    assert len(kept) == len(before) - 1
    # unchanged files keep their provenance; the edited file's chunks point at the new commit
    for cid in kept:
        path, commit = after[cid]
        assert commit == (edit if path == "guides/fayette.md" else before[cid][1])
    # created_at survives an edit; updated_at moves
    parent = dict(rows(home, "SELECT path, created_at FROM parents"))
    assert parent["guides/fayette.md"] == created["guides/fayette.md"]
    updated = rows(home, "SELECT updated_at FROM parents WHERE path = 'guides/fayette.md'")[0][0]
    assert updated > created["guides/fayette.md"]
    assert chroma_ids(home, "docs") == set(after)


def test_deleted_file_leaves_no_stale_chunks(tmp_path: Path, repo, embedder) -> None:
    config = load_sources(sources_file(tmp_path, repo.path))
    home = IndexHome(tmp_path / "index")
    build_and_publish(config, home, embedder)
    repo.commit(delete=["CHARTER.md"], files={"new.md": "# New\n\nA new page about winter heating help.\n"})
    result = build_and_publish(config, home, embedder)
    stats = result.sources["docs"]
    assert (stats.files_new, stats.files_deleted, stats.chunks_new, stats.chunks_deleted) == (1, 1, 1, 2)
    paths = {p for (p,) in rows(home, "SELECT DISTINCT path FROM chunks")}
    assert "CHARTER.md" not in paths and "new.md" in paths
    ids = {cid for (cid,) in rows(home, "SELECT chunk_id FROM chunks")}
    assert chroma_ids(home, "docs") == ids
    assert set(load_snapshot(home, home.current()).ids) == ids


def test_no_new_commit_publishes_nothing(tmp_path: Path, repo, embedder) -> None:
    config = load_sources(sources_file(tmp_path, repo.path))
    home = IndexHome(tmp_path / "index")
    first = build_and_publish(config, home, embedder)
    (repo.path / "CHARTER.md").write_text("uncommitted edits are not indexed\n")
    again = build_version(config, home, embedder)
    assert not again.staged
    assert "no new commits" in again.reason
    assert home.current() == first.version_id
    assert home.published_versions() == [first.version_id]


def test_identical_text_is_embedded_once_across_sources(tmp_path: Path, make_repo, embedder) -> None:
    a = make_repo("a", files={"shared.md": "# Shared\n\nThe same paragraph in two repositories.\n"})
    b = make_repo("b", files={"copy.md": "# Shared\n\nThe same paragraph in two repositories.\n"})
    path = tmp_path / "sources.yaml"
    path.write_text(
        f"sources:\n  - {{name: a, repo: {a.path}, collection: one}}\n  - {{name: b, repo: {b.path}, collection: two}}\n"
    )
    home = IndexHome(tmp_path / "index")
    result = build_and_publish(load_sources(path), home, embedder)
    assert (result.embeddings_computed, result.embeddings_reused) == (1, 1)
    ids = [cid for (cid,) in rows(home, "SELECT chunk_id FROM chunks")]
    assert len(set(ids)) == 2  # same text, two chunks (one per source)
    dense = load_snapshot(home, home.current()).dense.materialize()
    assert dense.shape[0] == 2 and np.allclose(dense[0], dense[1])


def test_repeated_text_in_one_file_gets_distinct_ids(tmp_path: Path, make_repo, embedder) -> None:
    text = "# Notes\n\n## Monday\n\nSame note.\n\n## Tuesday\n\nSame note.\n"
    repo = make_repo(files={"notes.md": text})
    home = IndexHome(tmp_path / "index")
    build_and_publish(load_sources(sources_file(tmp_path, repo.path)), home, embedder)
    assert rows(home, "SELECT COUNT(DISTINCT chunk_id) FROM chunks")[0][0] == 2


def test_oversized_file_is_truncated_and_reported(tmp_path: Path, make_repo, embedder) -> None:
    big = "# Big\n\n" + "\n\n".join(f"Line {i} of a long log." for i in range(400))
    repo = make_repo(files={"big.md": big})
    config = load_sources(sources_file(tmp_path, repo.path, index="  max_file_bytes: 2048\n  max_chunk_chars: 500\n"))
    home = IndexHome(tmp_path / "index")
    result = build_and_publish(config, home, embedder)
    assert result.sources["docs"].truncated_files == 1
    (truncated, size) = rows(home, "SELECT truncated, size FROM parents")[0]
    assert truncated and size == len(big)
    assert sum(len(c.encode()) for (c,) in rows(home, "SELECT content FROM chunks")) <= 2048


def test_retention_prunes_old_versions_but_keeps_current(tmp_path: Path, repo, embedder) -> None:
    config = load_sources(sources_file(tmp_path, repo.path))
    home = IndexHome(tmp_path / "index")
    versions = []
    for i in range(4):
        repo.commit({"log.md": f"# Log\n\nEntry {i}.\n"})
        versions.append(build_and_publish(config, home, embedder).version_id)
    assert home.published_versions() == versions[-2:]  # retention: 2
    assert home.current() == versions[-1]
    home.rollback(versions[-2])
    assert home.current() == versions[-2]


def test_publish_refuses_a_version_built_on_a_stale_base(tmp_path: Path, repo, embedder) -> None:
    config = load_sources(sources_file(tmp_path, repo.path))
    home = IndexHome(tmp_path / "index")
    build_and_publish(config, home, embedder)
    repo.commit({"a.md": "# A\n\nfirst\n"})
    staged_a = build_version(config, home, embedder)
    repo.commit({"b.md": "# B\n\nsecond\n"})
    staged_b = build_version(config, home, embedder)
    home.publish(staged_b.version_id, staged_b.base_version, 5)
    with pytest.raises(PublishConflict, match="has been published since"):
        home.publish(staged_a.version_id, staged_a.base_version, 5)
    assert home.current() == staged_b.version_id


def test_unreadable_source_keeps_its_chunks_and_is_reported(tmp_path: Path, repo, make_repo, embedder) -> None:
    other = make_repo("other", files={"x.md": "# X\n\nOther repo.\n"})
    extra = f"  - name: other\n    repo: {other.path}\n    collection: other\n"
    config = load_sources(sources_file(tmp_path, repo.path, extra=extra))
    home = IndexHome(tmp_path / "index")
    build_and_publish(config, home, embedder)
    other_ids = {cid for (cid,) in rows(home, "SELECT chunk_id FROM chunks WHERE source = 'other'")}
    (other.path / ".git").rename(other.path / "git-moved")
    repo.commit({"a.md": "# A\n\nnew\n"})
    result = build_and_publish(config, home, embedder)
    assert "is not a git repository" in result.sources["other"].error
    assert {cid for (cid,) in rows(home, "SELECT chunk_id FROM chunks WHERE source = 'other'")} == other_ids
    outcome = checks.check_sources_readable(home.current_manifest())
    assert not outcome.passed and "other" in outcome.failures[0]


def test_missing_repository_is_a_clear_error(tmp_path: Path, embedder) -> None:
    config = load_sources(sources_file(tmp_path, tmp_path / "no-such-repo"))
    with pytest.raises(SourceError, match=r"source 'docs': repository path .*no-such-repo does not exist"):
        build_version(config, IndexHome(tmp_path / "index"), embedder)


def test_sealed_provenance_check_catches_rewritten_history(tmp_path: Path, repo, embedder) -> None:
    config = load_sources(sources_file(tmp_path, repo.path))
    home = IndexHome(tmp_path / "index")
    result = build_version(config, home, embedder)
    staged = home.staged_dir(result.version_id)
    assert checks.check_sealed_provenance(staged, result.manifest).passed
    # rewrite history: the indexed commit no longer exists
    repo.git("checkout", "-q", "--orphan", "rewritten")
    repo.commit({"CONSTITUTION.md": "# Constitution\n\nSeal: ∞Δ∞\n\nRewritten.\n"})
    repo.git("branch", "-D", "main")
    repo.git("reflog", "expire", "--expire=now", "--all")
    repo.git("gc", "-q", "--prune=now")
    outcome = checks.check_sealed_provenance(staged, result.manifest)
    assert not outcome.passed
    assert "not found" in outcome.failures[0]


def test_single_query_fast_path_gives_the_same_vector(embedder) -> None:
    text = "Where can I get help paying my heating bill in Beckley?"
    exact = embedder.with_encoder(None, "fp32")  # the batch path in the query's (float32) precision
    assert np.allclose(embedder.encode_one(text), exact.encode([text])[0], atol=1e-5)
    # The index's vector of the same text (int8-block by default) is that vector to quantisation.
    assert float(embedder.encode_one(text) @ embedder.encode([text])[0]) > 0.999


def test_parts_owned_by_other_steps_survive_a_chunk_rebuild(tmp_path: Path, repo, embedder) -> None:
    from livemem.version.store import derive_version, write_manifest

    config = load_sources(sources_file(tmp_path, repo.path))
    home = IndexHome(tmp_path / "index")
    first = build_and_publish(config, home, embedder)
    with home.write_lock():
        version, staged, base = derive_version(home)
        assert base == first.version_id and not (staged / "manifest.json").exists()
        con = connect(staged, read_only=False)
        con.execute("CREATE TABLE registry AS SELECT 'lr-1' AS local_resource_id")
        con.close()
        (staged / "exports").mkdir()
        (staged / "exports" / "relations.nt").write_text("<a> <b> <c> .\n")
        write_manifest(staged, {**home.manifest(base), "version_id": version, "registry": {"rows": 1}})
    home.publish(version, base, 5)

    repo.commit({"CHARTER.md": CHARTER + "\n## Amendments\n\nBy two-thirds vote.\n"})
    rebuilt = build_and_publish(config, home, embedder)
    assert rebuilt.base_version == version
    assert rows(home, "SELECT local_resource_id FROM registry") == [("lr-1",)]
    assert (home.version_dir(home.current()) / "exports" / "relations.nt").read_text() == "<a> <b> <c> .\n"
    assert home.current_manifest()["registry"] == {"rows": 1}


def test_edited_chunk_inherits_attention_of_the_chunk_it_replaced(tmp_path: Path, repo, embedder) -> None:
    from livemem.version.store import derive_version, write_manifest

    config = load_sources(sources_file(tmp_path, repo.path))
    home = IndexHome(tmp_path / "index")
    build_and_publish(config, home, embedder)
    snap = dict(rows(home, "SELECT heading_path, chunk_id FROM chunks WHERE path = 'guides/fayette.md'"))
    snap_id, wic_id = snap['["Guide", "SNAP"]'], snap['["Guide", "WIC"]']
    with home.write_lock():  # what a rollup does: a new version with changed attention only
        version, staged, base = derive_version(home)
        con = connect(staged, read_only=False)
        assert con.execute("SELECT COUNT(*) FROM attention").fetchone()[0] == 0  # only used chunks get a row
        con.execute("INSERT INTO attention VALUES (?, 2.5, 'Δ3'), (?, 1.0, NULL)", [wic_id, snap_id])
        con.close()
        write_manifest(staged, {**home.manifest(base), "version_id": version})
    home.publish(version, base, 5)

    repo.commit({"guides/fayette.md": GUIDE.replace("Nutrition for infants.", "Nutrition for infants and mothers.")})
    build_and_publish(config, home, embedder)
    after = {h: (cid, score, seen) for h, cid, score, seen in rows(
        home,
        "SELECT c.heading_path, c.chunk_id, a.attention_score, a.last_breath_seen FROM chunks c "
        "JOIN attention a USING (chunk_id) WHERE c.path = 'guides/fayette.md'",
    )}  # fmt: skip
    new_wic, score, seen = after['["Guide", "WIC"]']
    assert new_wic != wic_id and (score, seen) == (2.5, "Δ3")  # edited: inherits from the replaced chunk
    assert after['["Guide", "SNAP"]'] == (snap_id, 1.0, None)  # unchanged: keeps its own
    assert rows(home, "SELECT predecessors FROM chunk_lineage WHERE chunk_id = ?", [new_wic]) == [([wic_id],)]

    repo.commit({"guides/fayette.md": GUIDE.replace("Nutrition for infants.", "Nutrition for families.")})
    build_and_publish(config, home, embedder)
    lineage = rows(
        home,
        'SELECT l.predecessors FROM chunk_lineage l JOIN chunks c USING (chunk_id) WHERE c.heading_path = \'["Guide", "WIC"]\'',
    )
    assert lineage == [([new_wic, wic_id],)]


def test_a_version_of_an_older_layout_is_rebuilt_not_reused(tmp_path: Path, repo, embedder) -> None:
    config = load_sources(sources_file(tmp_path, repo.path))
    home = IndexHome(tmp_path / "index")
    first = build_and_publish(config, home, embedder)
    manifest_file = home.version_dir(first.version_id) / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    manifest["layout_version"] = 1  # as if written before segments
    manifest_file.write_text(json.dumps(manifest))
    with pytest.raises(IndexUnavailable, match="older layout"):
        load_snapshot(home, first.version_id)
    again = build_and_publish(config, home, embedder)
    assert again.staged and again.embeddings_computed == 0  # rebuilt from the embedding cache, nothing re-embedded
    assert set(load_snapshot(home, home.current()).ids) == {c for (c,) in rows(home, "SELECT chunk_id FROM chunks")}
    assert build_version(config, home, embedder).reason.startswith("no new commits")


def test_default_build_writes_no_vector_store_and_switching_it_on_rebuilds_it(
    tmp_path: Path, make_repo, embedder
) -> None:
    repo = make_repo(files={"a.md": "# A\n\nalpha text\n", "b.md": "# B\n\nbeta text\n"})
    sources = tmp_path / "plain.yaml"
    sources.write_text(f"sources:\n  - {{name: docs, repo: {repo.path}, collection: docs}}\n", encoding="utf-8")
    home = IndexHome(tmp_path / "index")
    first = build_and_publish(load_sources(sources), home, embedder)
    assert not (home.version_dir(first.version_id) / "chroma").exists()
    assert home.current_manifest()["vector_store"] == "none"
    assert "chroma_s" not in first.timings

    sources.write_text(
        f"index: {{vector_store: chroma}}\nsources:\n  - {{name: docs, repo: {repo.path}, collection: docs}}\n",
        encoding="utf-8",
    )
    second = build_and_publish(load_sources(sources), home, embedder)  # same commit: the switch alone rebuilds
    assert second.staged and home.current_manifest()["vector_store"] == "chroma"
    ids = {r[0] for r in rows(home, "SELECT chunk_id FROM chunks")}
    assert chroma_ids(home, "docs") == ids and len(ids) == 2
    assert second.embeddings_computed == 0  # vectors came from the cache


def test_files_chunked_in_batches_are_chunked_as_one_by_one(monkeypatch) -> None:
    """A build chunks its files in batches (one tokenizer call for a batch's new words); the chunks are exactly
    those of each file chunked alone, with the configured word-piece limit."""
    from livemem.ingest import read as read_module
    from livemem.ingest.chunking import chunk_file

    files = [
        (f"docs/page-{i}.md", f"# Page {i}\n\n## Part\n\n" + " ".join(f"word{j} text{i * j}" for j in range(150)))
        for i in range(40)
    ] + [("notes.txt", "one line\n\nanother paragraph of plain text")]
    monkeypatch.setattr(read_module, "CHUNK_BATCH_FILES", 7)
    batched = read_module.chunk_many(files, 2000, 64)
    assert batched == [chunk_file(path, text, 2000, 64) for path, text in files]
    assert sum(len(c) for c in batched) > len(files)  # the pages were split (64 word pieces each at most)


def test_the_configured_word_piece_limit_holds_for_every_embedded_chunk(tmp_path: Path, repo, embedder) -> None:
    from livemem.ingest.chunking import count_tokens

    config = load_sources(sources_file(tmp_path, repo.path, index="  chunk_tokens: 24\n"))
    home = IndexHome(tmp_path / "index")
    build_and_publish(config, home, embedder)
    chunks = rows(home, "SELECT content, heading_path FROM chunks")
    assert len(chunks) > len(rows(home, "SELECT path FROM parents"))
    for content, heading in chunks:
        assert count_tokens(records.embed_text(content, json.loads(heading))) <= 24, content
