"""Sentence vectors through the build (``livemem.index.sentences``): written for prose chunks only, carried and
merged with their chunks, equal to a from-scratch build, switched off by ``index.sentences: false``, and a damaged
sentence file makes the version unusable instead of silently scoring without it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from livemem.engine.snapshot import IndexUnavailable, load_snapshot
from livemem.index.sentences import SENTENCES_FILE, sentence_texts
from livemem.ingest.build import build_version
from livemem.ingest.verify import compare_versions
from livemem.settings import EngineConfig
from livemem.sources.config import load_sources
from livemem.version.segments import MAX_SEGMENTS
from livemem.version.store import IndexHome


def page(i: int, extra: str = "") -> str:
    return (
        f"# Page {i}\n\nThe county office {i} helps with heating bills. It opens at nine on weekdays. "
        f"Bring an ID and a recent bill.{extra}\n\n## Contact\n\nCall the desk.\n"
    )


@pytest.fixture
def prose(make_repo):
    files = {f"docs/page-{i:02d}.md": page(i) for i in range(12)}
    files["tools/run.py"] = "def run():\n    return 'Done. Twice. Thrice.'\n"
    return make_repo(files=files)


def sources(tmp_path: Path, repo: Path, sentences: bool | None = None) -> Path:
    path = tmp_path / f"sources-{sentences}.yaml"
    index = "" if sentences is None else f"index:\n  sentences: {str(sentences).lower()}\n"
    path.write_text(f"{index}sources:\n  - name: docs\n    repo: {repo}\n    collection: docs\n", encoding="utf-8")
    return path


def publish(config, home: IndexHome, embedder) -> str:
    result = build_version(config, home, embedder)
    assert result.staged, result.reason
    home.publish(result.version_id, result.base_version, retention=50)
    return result.version_id


def test_prose_chunks_get_their_sentences_and_code_none(tmp_path, prose, embedder) -> None:
    config = load_sources(sources(tmp_path, prose.path))
    home = IndexHome(tmp_path / "index")
    snap = load_snapshot(home, publish(config, home, embedder))
    assert snap.dense.has_sentences
    for row in range(snap.size):
        record = snap.rows[row]
        got = snap.dense.sentence_vectors(row)
        want = sentence_texts(record["content"], json.loads(record["heading_path"]), record["type"])
        assert got.shape == (len(want), 384), record["path"]
        if want:  # the very vectors of those texts
            np.testing.assert_allclose(got, embedder.encode(want), atol=0.01)  # int8 codes, a scale each
    by_path: dict[str, list[int]] = {}
    for r in range(snap.size):
        by_path.setdefault(snap.rows[r]["path"], []).append(snap.dense.sentence_vectors(r).shape[0])
    assert by_path["tools/run.py"] == [0] and by_path["docs/page-03.md"] == [3, 0]  # "Call the desk." alone: none
    # a chunk's best sentence for a question is the one that answers it
    query = embedder.encode_one("what time does it open on weekdays")
    opens = [r for r in range(snap.size) if "opens at nine" in snap.rows[r]["content"]]
    best = snap.dense.best_sentences(query, np.array(opens))
    for r, score in zip(opens, best, strict=True):
        vectors = snap.dense.sentence_vectors(r)
        cosines = vectors @ query
        assert score == pytest.approx(float(cosines.max()), abs=1e-5)
        assert int(np.argmax(cosines)) == 1  # "It opens at nine on weekdays."


def test_switching_sentences_off_changes_the_sentence_vectors_only(tmp_path, prose, embedder) -> None:
    on = IndexHome(tmp_path / "on")
    off = IndexHome(tmp_path / "off", cache_dir=on.cache_dir)
    with_sentences = publish(load_sources(sources(tmp_path, prose.path)), on, embedder)
    config_off = load_sources(sources(tmp_path, prose.path, sentences=False))
    without = publish(config_off, off, embedder)
    assert not load_snapshot(off, without).dense.has_sentences
    assert not any((off.root / "parts").glob(f"*/{SENTENCES_FILE}"))
    comparison = compare_versions(on.version_dir(with_sentences), off.version_dir(without))
    assert comparison.general and all("sentence vectors of chunk" in line for line in comparison.general)
    assert not comparison.differences  # rows, files, chunk vectors and BM25: the same
    # the setting is part of the sources' fingerprint: switching it on an existing index rebuilds
    again = build_version(config_off, on, embedder)
    assert again.staged and again.manifest["changes"]["per_source"]["docs"]["files_changed"] == 13


def test_carried_and_merged_sentences_equal_a_from_scratch_build(tmp_path, prose, embedder) -> None:
    config = load_sources(sources(tmp_path, prose.path))
    home = IndexHome(tmp_path / "index")
    publish(config, home, embedder)
    for i in range(MAX_SEGMENTS + 2):  # enough one-file versions to force merges of segments with sentences
        prose.commit({f"docs/page-{i:02d}.md": page(i, f" Edit {i} adds snow removal. Call early.")})
        version = publish(config, home, embedder)
    scratch = IndexHome(tmp_path / "scratch", cache_dir=home.cache_dir)
    reference = publish(config, scratch, embedder)
    comparison = compare_versions(home.version_dir(version), scratch.version_dir(reference))
    assert comparison.equal, comparison.lines()
    snap = load_snapshot(home, version)
    assert len(snap.segments) <= MAX_SEGMENTS
    edited = [r for r in range(snap.size) if "snow removal" in snap.rows[r]["content"]]
    assert len(edited) == MAX_SEGMENTS + 2 and all(snap.dense.sentence_vectors(r).shape[0] == 5 for r in edited)


def test_a_damaged_sentence_file_makes_the_version_unusable(tmp_path, prose, embedder, monkeypatch) -> None:
    config = load_sources(sources(tmp_path, prose.path))
    home = IndexHome(tmp_path / "index", cache_dir=tmp_path / "cache")
    version = publish(config, home, embedder)
    (path,) = (home.root / "parts").glob(f"*/{SENTENCES_FILE}")
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[-20] ^= 0xFF
    path.write_bytes(bytes(data))
    engine = EngineConfig.defaults(serving_cache=tmp_path / "copies")  # no copy written there before the damage
    home = IndexHome(home.root, cache_dir=tmp_path / "cache", engine=engine)
    with pytest.raises(IndexUnavailable, match=SENTENCES_FILE.replace(".", r"\.")):
        load_snapshot(home, version)
