"""Issue 48, goal 8: "consider also" once usage supports it, on a usage replay through the real API.

Retrieved together alone never reaches a suggestion: a chunk's neighbours in its first 5 results are in its results
again, and the chunk people confirmed is lifted into them by its attention, so every answer's ``consider_also`` was
``[]``, also after confirmed feedback. What one person confirmed for one question beside what they confirmed for
another is related too (``livemem.usage.attention.confirmed_together``): it is suggested beside either question.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from support.serving import API_KEYS, build_and_publish, make_workspace

from livemem.sources.breath import Breath
from livemem.usage.attention import AttentionConfig, DayEvents, confirmed_together, rollup_day
from livemem.version.store import IndexHome
from serving.app import create_app
from serving.settings import Settings

FIRST, SECOND = "SNAP food assistance applications", "heating bill help in Beckley"


def ask(client: TestClient, **body) -> dict:
    response = client.post("/query", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_callers_confirmed_chunks_are_related_and_nobody_elses() -> None:
    events = DayEvents(
        feedback=[("t1", "a", True), ("t2", "b", True), ("t3", "c", True), ("t4", "c", False), ("t5", None, True),
                  ("t6", "d", True), ("t7", "e", True)],
        callers=["p1", "p1", "p1", "p1", "p1", "p2", None],
    )  # fmt: skip
    # p1: a and b (c was taken back, the whole answer t5 names no chunk); p2 confirmed one chunk; no caller: none
    assert sorted(confirmed_together(events)) == [("confirmed-by:p1", "a"), ("confirmed-by:p1", "b")]


@pytest.fixture(scope="module")
def replay(tmp_path_factory, embedder):
    """Three people each ask two questions and confirm the first result of each; the night's rollup, published."""
    root = tmp_path_factory.mktemp("consider-also-replay")
    home = IndexHome(root / "rag_index")
    build_and_publish(make_workspace(root), home, embedder)
    settings = Settings(index_dir=home.root, api_keys=API_KEYS, warm_up=False, cache_size=0)
    with TestClient(create_app(settings, embedder)) as client:
        client.before = ask(client, query=FIRST, top_k=1, mode="sparse")
        confirmed = {}
        for n in range(3):
            person = TestClient(client.app, client=(f"203.0.113.{n + 1}", 50000))
            for question in (FIRST, SECOND):
                data = ask(person, query=question, top_k=1, mode="sparse")
                chunk = data["results"][0]["chunk_id"]
                confirmed[question] = chunk
                feedback = {"trace_id": data["trace_id"], "chunk_ids": [chunk], "useful": True}
                assert person.post("/feedback", json=feedback).status_code == 200
        assert confirmed[FIRST] != confirmed[SECOND]
        client.confirmed = confirmed
        result = rollup_day(home, datetime.now(UTC).date(), AttentionConfig(), Breath("Δ3", "normal"))
        assert result.staged and result.malformed == 0, result.reason
        home.publish(result.version_id, result.base_version, 5)
        yield client


def test_consider_also_appears_once_usage_supports_it(replay: TestClient) -> None:
    assert replay.before["consider_also"] == []  # no usage yet
    for question, other in ((FIRST, SECOND), (SECOND, FIRST)):
        data = ask(replay, query=question, top_k=1, mode="sparse")
        shown = {r["chunk_id"] for r in data["results"]}
        suggested = [s["chunk_id"] for s in data["consider_also"]]
        assert replay.confirmed[other] not in shown
        assert replay.confirmed[other] in suggested, (question, data["consider_also"])
        assert all(s["suggestion"] is True and s["related_to"] for s in data["consider_also"])
    none = ask(replay, query=FIRST, top_k=1, mode="sparse", consider_also=0)
    assert none["consider_also"] == []
