"""``mode: sparse`` scores a chunk's heading path as a second BM25 field (``livemem.index.sparse.HEADINGS_WEIGHT``):
a later chunk of a long section, whose own text no longer holds the section's heading line, is found by the
heading's words too. Hybrid's BM25 side stays the chunk text alone (docs/decisions/0003-dense-blend-and-heading-field.md)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fastapi.testclient import TestClient
from support.serving import API_KEYS, build_and_publish, commit_files, make_workspace

from livemem.engine.snapshot import heading_postings, load_snapshot
from livemem.index.postings import Postings, heading_text
from livemem.index.sparse import HEADINGS_WEIGHT
from livemem.query.retrieval import Retriever
from livemem.query.types import Query
from livemem.version.store import IndexHome
from serving.app import create_app
from serving.settings import Settings

# One long section under a heading whose words ("Quarrier", "furnace") its text never repeats: several chunks.
LONG = "# Quarrier furnace rebates\n\n" + "\n\n".join(
    f"Step {i}: households bring their utility bill number {1000 + i} and proof of residence to the county office."
    for i in range(120)
)


@pytest.fixture(scope="module")
def snap(tmp_path_factory, embedder):
    root = tmp_path_factory.mktemp("sparse-headings")
    sources = make_workspace(root)
    commit_files(root / "repo", {"benefits/quarrier.md": LONG}, "a long section")
    home = IndexHome(root / "rag_index")
    build_and_publish(sources, home, embedder)
    snapshot = load_snapshot(home, home.current())
    yield snapshot
    snapshot.close()


def _rows(snap, path: str) -> np.ndarray:
    return np.flatnonzero(snap.columns["path"] == path)


def test_later_chunks_of_a_section_are_found_by_its_heading_in_sparse_mode(snap, embedder) -> None:
    rows = _rows(snap, "benefits/quarrier.md")
    assert rows.size >= 3  # the section is split: only its first chunk holds the heading line
    collections = snap.collections_for(frozenset({"public"}))
    index = snap.sparse_for(frozenset({snap.access_of[c] for c in collections}))
    body, both = index.scores("Quarrier furnace"), index.field_scores("Quarrier furnace")
    headings = index.headings().scores("Quarrier furnace", index.corpus)
    assert np.array_equal(both, body + np.float32(HEADINGS_WEIGHT) * headings)
    later = rows[body[rows] == 0]
    assert later.size >= 2 and np.all(headings[later] > 0)  # their text lacks the words; their heading has them
    retriever = Retriever(embedder)
    found = retriever.search(snap, Query("Quarrier furnace", top_k=50, mode="sparse"), collections)
    shown = [h.row for h in found.chunks]
    assert set(rows) == set(shown)  # every chunk of the section, nothing else (no other heading or text says it)
    assert shown[0] not in later  # the chunk holding the heading line itself ranks first
    # hybrid fuses the chunk text's BM25 alone: its sparse scores are the body's
    hybrid = retriever.search(snap, Query("Quarrier furnace", top_k=10, mode="hybrid"), collections)
    assert all(h.sparse == body[h.row] for h in hybrid.chunks)


def test_heading_field_through_the_api_and_its_postings_per_segment(snap, embedder) -> None:
    """Through /query the later chunks come back in sparse mode; the field's postings are derived once per segment
    (shared by every version keeping it) and hold one document per chunk row."""
    settings = Settings(index_dir=snap.path.parent.parent, api_keys=API_KEYS, warm_up=False, cache_size=0)
    with TestClient(create_app(settings, embedder)) as client:
        data = client.post("/query", json={"query": "Quarrier furnace", "mode": "sparse", "top_k": 50}).json()
    paths = {r["provenance"]["path"] for r in data["results"]}
    assert paths == {"benefits/quarrier.md"} and len(data["results"]) == _rows(snap, "benefits/quarrier.md").size
    for segment, _ in snap.sparse_parts:
        first = heading_postings(segment)
        assert heading_postings(segment) is first and first.size == segment.size
        # each distinct path tokenized once, gathered per row: the postings of every row's heading text
        texts = [heading_text(json.loads(h)) if h else "" for h in segment.table.column("heading_path")]
        want = Postings.build(texts)
        for name in ("terms", "starts", "rows", "tf", "lengths"):
            assert np.array_equal(getattr(first, name), getattr(want, name)), name


@pytest.mark.parametrize(
    "query",
    [
        " ".join(f"w{i}x" for i in range(60_000)),  # ~400 KB: over the 4,000-character limit, a short 422
        " ".join(f"w{i}x" for i in range(650))[:3990],  # the most distinct words a query may hold, in both fields
        "the of and is a",  # stopwords only: no BM25 term at all
        "!!! ??? ... >>> ---",  # punctuation only
        "東京都 👩‍👩‍👧‍👦 e\u0301te\u0301 \u200b\u200b \x00 \ufeff",  # CJK, ZWJ emoji, combining marks, NUL, BOM
        ("Quarrier " * 450)[:3990],  # one heading word repeated: a large query-term weight in both fields
    ],
)
def test_hostile_queries_in_dense_and_sparse_mode_answer_and_stay_finite(snap, embedder, query: str) -> None:
    """The modes this round changed, on hostile text: an answer (never a 5xx), finite scores, within the limits."""
    settings = Settings(index_dir=snap.path.parent.parent, api_keys=API_KEYS, warm_up=False, cache_size=0)
    with TestClient(create_app(settings, embedder)) as client:
        for mode in ("sparse", "dense", "hybrid"):
            answer = client.post("/query", json={"query": query, "mode": mode, "top_k": 5})
            assert answer.status_code in (200, 422), (mode, answer.status_code, answer.text[:300])
            assert (answer.status_code == 422) is (len(query) > 4000), mode
            if answer.status_code == 200:
                for result in answer.json()["results"]:
                    assert np.isfinite(result["score"]) and 0.0 <= result["score_normalized"] <= 1.0, mode
            else:
                assert len(answer.text) < 5_000 and "query" in answer.text, mode
