"""What the nightly rollup learned, used by serving: attention filters, the default ranking, "consider also"."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from support.serving import API_KEYS, INTERNAL_KEY, build_and_publish, make_workspace

from livemem.query.types import DEFAULT_ATTENTION_BOOST
from livemem.sources.breath import Breath
from livemem.usage.attention import AttentionConfig, rollup_day
from livemem.version.store import IndexHome
from serving.app import create_app
from serving.settings import Settings

INTERNAL = {"X-API-Key": INTERNAL_KEY}


BEFORE_QUESTIONS = ("SNAP food assistance applications Fayette County", "heating bill help in Beckley")


def ask(client: TestClient, headers: dict | None = None, **body) -> dict:
    response = client.post("/query", json=body, headers=headers or {})
    assert response.status_code == 200, response.text
    return response.json()


def paths(data: dict, key: str = "results") -> list[str]:
    return [r["provenance"]["path"] for r in data[key]]


@pytest.fixture(scope="module")
def learned(tmp_path_factory, embedder):
    """An index that has been used (queries and feedback through the API) and rolled up for today."""
    root = tmp_path_factory.mktemp("attention-serving")
    home = IndexHome(root / "rag_index")
    build_and_publish(make_workspace(root), home, embedder)
    settings = Settings(index_dir=home.root, api_keys=API_KEYS, warm_up=False, cache_size=0)
    with TestClient(create_app(settings, embedder)) as client:
        client.before = {q: ask(client, query=q, top_k=3) for q in BEFORE_QUESTIONS}  # the ranking before any use
        # SNAP questions return the Fayette SNAP section together with the statewide FAQ; people find the FAQ useful
        # (three people: one caller's verdicts on a chunk count once a day, docs/attention.md)
        for n in range(3):
            person = TestClient(client.app, client=(f"203.0.113.{n + 1}", 50000))
            data = ask(person, query="SNAP food assistance applications", top_k=2, mode="sparse")
            assert set(paths(data)) == {"benefits/fayette-county.md", "benefits/statewide-faq.md"}
            faq = next(r["chunk_id"] for r in data["results"] if r["provenance"]["path"].endswith("faq.md"))
            person.post("/feedback", json={"trace_id": data["trace_id"], "chunk_ids": [faq], "useful": True})
        # caseworkers see the internal playbook beside the FAQ and find the playbook useful
        data = ask(client, INTERNAL, query="SNAP food assistance emergencies zebra protocol", top_k=3, mode="sparse")
        playbook = next(r["chunk_id"] for r in data["results"] if "internal/" in r["provenance"]["path"])
        client.post(
            "/feedback", json={"trace_id": data["trace_id"], "chunk_ids": [playbook], "useful": True}, headers=INTERNAL
        )
        today = datetime.now(UTC).date()
        result = rollup_day(home, today, AttentionConfig(), Breath("Δ3", "normal"))
        assert result.staged and result.malformed == 0, result.reason
        home.publish(result.version_id, result.base_version, 5)
        yield client


def test_attention_filters_select_used_chunks(learned: TestClient) -> None:
    used = ask(learned, query="SNAP food assistance", filters={"min_attention": 2.0}, mode="sparse", top_k=10)
    assert paths(used) == ["benefits/statewide-faq.md"]  # retrieved 3-4 times, confirmed useful 3 times
    assert used["results"][0]["attention_score"] == pytest.approx(3.0)  # confirmed useful 3 times
    # the Fayette section: shown 3 times beside the useful FAQ, never confirmed: no attention
    some = ask(learned, query="SNAP food assistance", filters={"min_attention": 0.001}, mode="sparse", top_k=10)
    assert paths(some) == ["benefits/statewide-faq.md"]
    seen = ask(learned, query="SNAP food assistance", filters={"last_seen_breath": "Δ3"}, mode="sparse", top_k=10)
    assert set(paths(seen)) == {"benefits/fayette-county.md", "benefits/statewide-faq.md"}
    assert all(r["last_breath_seen"] == "Δ3" for r in seen["results"])
    later = ask(learned, query="SNAP food assistance", filters={"last_seen_breath": "Δ4"}, mode="sparse")
    assert later["results"] == []
    sealed = ask(learned, query="council memory", filters={"seal_state": "SEALED"}, top_k=10)
    assert paths(sealed) == ["governance/CONSTITUTION.md"]


def test_consider_also_suggests_related_high_attention_chunks(learned: TestClient) -> None:
    data = ask(learned, query="Oak Hill office SNAP applications", top_k=1, mode="sparse")
    assert paths(data) == ["benefits/fayette-county.md"]
    assert paths(data, "consider_also") == ["benefits/statewide-faq.md"]
    suggestion = data["consider_also"][0]
    assert suggestion["suggestion"] is True
    assert suggestion["related_to"] == [data["results"][0]["chunk_id"]]
    assert ask(learned, query="Oak Hill office SNAP applications", top_k=1, consider_also=0)["consider_also"] == []


def test_consider_also_never_leaks_internal_chunks(learned: TestClient) -> None:
    for query in ("SNAP food assistance", "statewide FAQ SNAP online PATH portal", "emergencies"):
        for top_k in (1, 2, 3):
            data = ask(learned, query=query, top_k=top_k, consider_also=10)
            assert not any("internal/" in p for p in paths(data) + paths(data, "consider_also"))
    internal = ask(learned, INTERNAL, query="statewide FAQ SNAP online PATH portal", top_k=1, mode="sparse")
    assert "internal/caseworker-playbook.md" in paths(internal, "consider_also")


def test_confirmed_usefulness_lifts_a_chunk_in_the_default_ranking(learned: TestClient) -> None:
    question = "SNAP food assistance applications Fayette County"
    before = learned.before[question]["results"]
    assert paths({"results": before})[:2] == ["benefits/fayette-county.md", "benefits/statewide-faq.md"]
    now = ask(learned, query=question, top_k=3)  # default settings: living memory is part of the ranking
    assert paths(now)[:2] == ["benefits/statewide-faq.md", "benefits/fayette-county.md"]  # confirmed 3 times: up
    score = {r["chunk_id"]: r["score"] for r in now["results"]}
    for old in before:
        if old["provenance"]["path"] == "benefits/fayette-county.md":  # retrieved 3 times, never confirmed
            assert score[old["chunk_id"]] == old["score"]  # not a bit higher
        if old["provenance"]["path"] == "benefits/statewide-faq.md":  # lifted, but capped: at most ×(1 + boost)
            assert old["score"] < score[old["chunk_id"]] <= old["score"] * (1 + DEFAULT_ATTENTION_BOOST)


def test_attention_boost_zero_is_the_ranking_without_living_memory(learned: TestClient) -> None:
    for question, before in learned.before.items():
        off = ask(learned, query=question, top_k=3, attention_boost=0)
        assert [(r["chunk_id"], r["score"]) for r in off["results"]] == [
            (r["chunk_id"], r["score"]) for r in before["results"]
        ]
    # a question unlike any confirmed one is ranked exactly as without living memory: popularity never travels
    beckley = learned.before["heating bill help in Beckley"]["results"]
    default = ask(learned, query="heating bill help in Beckley", top_k=3)["results"]
    assert [(r["chunk_id"], r["score"]) for r in default] == [(r["chunk_id"], r["score"]) for r in beckley]
    assert any(
        r["attention_score"] > 0 for r in ask(learned, query="heating bill help in Beckley", top_k=10)["results"]
    )
    # chunks nobody confirmed keep exactly their score in the default ranking, whatever the question
    for question, before in learned.before.items():
        now = {r["chunk_id"]: r for r in ask(learned, query=question, top_k=3)["results"]}
        for old in before["results"]:
            if old["chunk_id"] in now and now[old["chunk_id"]]["attention_score"] == 0:
                assert now[old["chunk_id"]]["score"] == old["score"]


def test_query_body_with_suggestions_is_exactly_the_response_model(learned: TestClient) -> None:
    from serving.models import QueryResponse

    data = ask(learned, query="Oak Hill office SNAP applications", top_k=1, consider_also=3)
    assert data["consider_also"]
    assert data == QueryResponse.model_validate(data).model_dump(mode="json", by_alias=True)
