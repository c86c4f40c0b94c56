"""`score_normalized` is a threshold scale that recency and attention do not move (issue 32): with both boosts
applied the scores are not all 1.0, results are still ranked by the boosted score, each chunk keeps the
normalised score it has without boosts, and `min_score_normalized` keeps the same chunks."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from support.serving import API_KEYS, build_and_publish, make_workspace

from livemem.sources.breath import Breath
from livemem.usage.attention import AttentionConfig, rollup_day
from livemem.version.store import IndexHome
from serving.app import create_app
from serving.settings import Settings

QUESTION = "SNAP food assistance applications"
# a bias of 10 that has not decayed (a century's half-life): every chunk's score ×≈11, past the old cap of 1.0
BOOSTED = {"recency_bias": 10.0, "recency_half_life_days": 36_500, "attention_boost": 1.0}
PLAIN = {"recency_bias": 0.0, "attention_boost": 0.0}


def ask(client: TestClient, **body) -> dict:
    response = client.post("/query", json=body)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture(scope="module")
def used(tmp_path_factory, embedder):
    """An index where people confirmed the statewide FAQ useful for SNAP questions (attention applies)."""
    root = tmp_path_factory.mktemp("score-normalized")
    home = IndexHome(root / "rag_index")
    build_and_publish(make_workspace(root), home, embedder)
    settings = Settings(index_dir=home.root, api_keys=API_KEYS, warm_up=False, cache_size=0)
    with TestClient(create_app(settings, embedder)) as client:
        for _ in range(3):
            data = ask(client, query=QUESTION, top_k=2, mode="sparse")
            faq = next(r["chunk_id"] for r in data["results"] if r["provenance"]["path"].endswith("faq.md"))
            client.post("/feedback", json={"trace_id": data["trace_id"], "chunk_ids": [faq], "useful": True})
        result = rollup_day(home, datetime.now(UTC).date(), AttentionConfig(), Breath("Δ3", "normal"))
        assert result.staged, result.reason
        home.publish(result.version_id, result.base_version, 5)
        yield client


@pytest.mark.parametrize("mode", ["hybrid", "dense", "sparse"])
def test_boosts_reorder_but_do_not_move_the_threshold_scale(used, mode):
    plain = ask(used, query=QUESTION, mode=mode, top_k=50, **PLAIN)["results"]
    boosted = ask(used, query=QUESTION, mode=mode, top_k=50, **BOOSTED)["results"]
    assert len(plain) == len(boosted) >= 2
    # the boosts applied (each score ×≈11, the FAQ's more) ...
    by_id = {r["chunk_id"]: r for r in plain}
    assert all(abs(r["score"]) > 5 * abs(by_id[r["chunk_id"]]["score"]) for r in boosted if r["score"])
    # ... results are ranked by the boosted score ...
    assert [r["score"] for r in boosted] == sorted((r["score"] for r in boosted), reverse=True)
    # ... and the normalised score is the relevance part: not all 1.0, the same as without boosts
    normalized = [r["score_normalized"] for r in boosted]
    assert len(set(normalized)) > 1 and min(normalized) < 1.0, normalized
    for r in boosted:
        assert r["score_normalized"] == pytest.approx(by_id[r["chunk_id"]]["score_normalized"], abs=2e-6)
    # so a threshold keeps the same chunks with and without boosts
    values = sorted({r["score_normalized"] for r in plain})
    threshold = (values[len(values) // 2 - 1] + values[len(values) // 2]) / 2
    kept_plain = ask(used, query=QUESTION, mode=mode, top_k=50, min_score_normalized=threshold, **PLAIN)
    kept_boosted = ask(used, query=QUESTION, mode=mode, top_k=50, min_score_normalized=threshold, **BOOSTED)
    expected = {r["chunk_id"] for r in plain if r["score_normalized"] >= threshold}
    assert 0 < len(expected) < len(plain)
    assert {r["chunk_id"] for r in kept_plain["results"]} == expected
    assert {r["chunk_id"] for r in kept_boosted["results"]} == expected


def test_attention_alone_no_longer_lifts_the_used_chunk_to_one(used):
    """Attention (on by default) multiplied the FAQ's score up to ×2; its normalised score stays its relevance."""
    plain = ask(used, query=QUESTION, top_k=10, **PLAIN)["results"]
    default = ask(used, query=QUESTION, top_k=10)["results"]
    faq = next(r for r in default if r["provenance"]["path"].endswith("faq.md"))
    same = next(r for r in plain if r["chunk_id"] == faq["chunk_id"])
    assert faq["score"] > same["score"] * 1.2  # attention lifted its rank score
    assert faq["score_normalized"] == pytest.approx(same["score_normalized"], abs=2e-6)
