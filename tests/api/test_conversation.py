"""Conversations carry context through the real API: place, persona and topic named in earlier turns reach a
follow-up through `thread_id` (the per-process thread store, scoped to the caller's key) or the history the
request sends (/context and /chat `history`, OpenAI `messages`), visibly in `route.conversation`."""

from __future__ import annotations

import time
import uuid

import pytest
from fastapi.testclient import TestClient
from support.context import INTERNAL_KEY, example_index, make_app

from livemem.answer.conversation import (
    HISTORY_TURNS,
    ThreadState,
    ThreadStore,
    advance,
    caller_scope,
    carry,
    from_history,
)

WIC_ROWS = {"fay-wic-oakhill", "ral-wic-beckley"}


@pytest.fixture(scope="module")
def home(tmp_path_factory, embedder):
    return example_index(tmp_path_factory)


@pytest.fixture(scope="module")
def client(home, embedder):
    with TestClient(make_app(home, embedder)) as c:
        yield c


def thread() -> str:
    return uuid.uuid4().hex


def ask(client: TestClient, message: str, path: str = "/context", **fields) -> dict:
    headers = fields.pop("headers", None)
    r = client.post(path, json={"message": message, **fields}, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


def test_place_named_earlier_routes_the_follow_up(client):
    """The issue's example: without the thread, WIC clinics of two counties; with it, Fayette's only."""
    alone = ask(client, "where can I get WIC?")
    assert not alone["route"]["filters"]["county"] and alone["route"]["conversation"] is None
    assert {r["local_resource_id"] for r in alone["registry"]} == WIC_ROWS

    t = thread()
    ask(client, "I live in Oak Hill", thread_id=t)
    follow = ask(client, "where can I get WIC?", thread_id=t)
    route = follow["route"]
    assert route["filters"]["county"] == ["Fayette"] and route["wv_scoped"]
    assert route["conversation"] == {
        "source": "thread",
        "earlier_turns": 1,
        "carried": {"place": {"county": "Fayette", "zip": None, "from": "Oak Hill"}},
    }
    assert {"field": "county", "value": "Fayette", "from": "conversation: Oak Hill"} in route["self_query"]
    assert [r["local_resource_id"] for r in follow["registry"]] == ["fay-wic-oakhill"]
    assert follow["thread_id"] == t


def test_latest_place_wins_and_a_place_in_the_message_is_not_overridden(client):
    t = thread()
    ask(client, "I live in Oak Hill", thread_id=t)
    ask(client, "we moved to Beckley last week", thread_id=t)
    assert ask(client, "where can I get WIC?", thread_id=t)["route"]["filters"]["county"] == ["Raleigh"]
    own = ask(client, "WIC in Fayette County", thread_id=t)["route"]
    assert own["filters"]["county"] == ["Fayette"] and "place" not in own["conversation"]["carried"]
    out_of_state = ask(client, "now I live in Columbus, Ohio", thread_id=t)
    assert out_of_state["route"]["response_class"] == "redirect"
    after = ask(client, "where can I get WIC?", thread_id=t)["route"]
    # the conversation is about Columbus now: no West Virginia county, and never West Virginia's WIC (issue 32)
    assert not after["filters"]["county"] and after["response_class"] == "redirect"
    assert after["conversation"]["carried"]["place"] == {"county": None, "zip": None, "from": "Columbus, OH"}
    back = ask(client, "I'm back in Beckley. where can I get WIC?", thread_id=t)["route"]
    assert back["filters"]["county"] == ["Raleigh"] and back["response_class"] == "answer"


def test_topic_and_persona_carry_forward_on_chat_and_chat_sync(client):
    t = thread()
    first = ask(client, "Is there a food pantry in Beckley?", "/chat", thread_id=t, role="community")
    assert first["route"]["persona"] == "community"
    hours = ask(client, "what are the hours?", "/chat", thread_id=t)
    route = hours["route"]
    assert route["conversation"]["carried"] == {
        "place": {"county": "Raleigh", "zip": None, "from": "Beckley"},
        "topic": "pantry",
        "persona": "community",
    }
    assert route["persona"] == "community" and "food_pantry" in route["filters"]["resource_type"]
    assert hours["answer"].startswith("Here is what Living Memory has for you:")  # the community persona's heading
    assert {r["local_resource_id"] for r in hours["evidence"]["registry"]} >= {"ral-pantry-shadyspring"}
    sync = client.post("/chat/sync", json={"message": "and what about WIC?", "thread_id": t}).json()
    assert sync["route"]["filters"]["county"] == ["Raleigh"] and sync["route"]["persona"] == "community"
    assert {r["local_resource_id"] for r in sync["evidence"]["registry"]} == {"ral-wic-beckley"}


def test_threads_are_scoped_to_the_callers_key(client):
    """Another key sending the same thread_id reads nothing of it; the owner's next turn still carries."""
    t = thread()
    ask(client, "I live in Oak Hill", thread_id=t, headers={"X-API-Key": INTERNAL_KEY})
    stranger = ask(client, "where can I get WIC?", thread_id=t)
    assert stranger["route"]["conversation"] is None and not stranger["route"]["filters"]["county"]
    owner = ask(client, "where can I get WIC?", thread_id=t, headers={"Authorization": f"Bearer {INTERNAL_KEY}"})
    assert owner["route"]["filters"]["county"] == ["Fayette"]


def test_history_in_the_request_needs_no_thread_store(home, embedder):
    """With the store off (as for a request reaching another worker) the history sent carries the place."""
    with TestClient(make_app(home, embedder, thread_store_size=0)) as c:
        t = thread()
        ask(c, "I live in Oak Hill", thread_id=t)
        assert ask(c, "where can I get WIC?", thread_id=t)["route"]["conversation"] is None
        body = ask(c, "where can I get WIC?", history=["hello", "I live in Oak Hill"])
        assert body["route"]["conversation"]["source"] == "history"
        assert body["route"]["conversation"]["earlier_turns"] == 2
        assert [r["local_resource_id"] for r in body["registry"]] == ["fay-wic-oakhill"]


def test_openai_messages_carry_place_into_the_completion(client):
    body = {
        "model": "living-memory",
        "messages": [
            {"role": "user", "content": "I live in Oak Hill"},
            {"role": "assistant", "content": "Thanks! What do you need?"},
            {"role": "user", "content": "where can I get WIC?"},
        ],
    }
    r = client.post("/v1/chat/completions", json=body, headers={"Authorization": "Bearer public"})
    assert r.status_code == 200, r.text
    living = r.json()["living_memory"]
    assert living["route"]["filters"]["county"] == ["Fayette"]
    assert living["route"]["conversation"]["source"] == "history"
    assert living["options"]["history"]["place_from_earlier_turn"] == "Oak Hill"
    assert "Fayette WIC Clinic" in r.json()["choices"][0]["message"]["content"]


def test_a_cached_answer_keeps_each_callers_thread(client):
    a, b = thread(), thread()
    first = ask(client, "SNAP office hours in Raleigh County", thread_id=a)
    second = ask(client, "SNAP office hours in Raleigh County", thread_id=b)
    assert second["cached"] and (first["thread_id"], second["thread_id"]) == (a, b)


def test_thread_store_is_bounded_and_expires():
    store = ThreadStore(max_threads=2, ttl_s=0.3)
    for i in range(3):
        store.put("scope", f"t{i}", ThreadState(county="Fayette"))
    assert len(store) == 2 and store.get("scope", "t0") is None
    assert store.get("other-scope", "t2") is None and store.get("scope", "t2").county == "Fayette"
    time.sleep(0.35)
    assert store.get("scope", "t2") is None
    assert caller_scope(None) == "anonymous" and INTERNAL_KEY not in caller_scope(INTERNAL_KEY)


def test_carry_rules():
    state = from_history(["I live in Oak Hill", "help paying the heating bill"])
    assert (state.county, state.place, state.topic, state.turns) == ("Fayette", "Oak Hill", "heating", 2)
    assert carry(state, "hello!").notes is None  # small talk takes nothing
    follow = carry(state, "what about in Raleigh County?")
    assert follow.county is None and follow.message == "what about in Raleigh County? (about: heating)"
    assert advance(state, "ZIP 25801 please").county == "Raleigh"
    # only the latest HISTORY_TURNS are read (it bounds one request's work), all are counted
    old = from_history(["I live in Oak Hill", *["thanks"] * HISTORY_TURNS])
    assert old.county is None and old.turns == HISTORY_TURNS + 1


@pytest.mark.parametrize(
    "body",
    [
        {"message": "where can I get WIC?", "thread_id": "x" * 129},
        {"message": "where can I get WIC?", "history": ["I live in Oak Hill"] * 51},
        {"message": "where can I get WIC?", "history": ["a" * 4001]},
        {"message": "where can I get WIC?", "history": "I live in Oak Hill"},
        {"message": "where can I get WIC?", "max_words": 10**12},
        {"message": "where can I get WIC?", "max_words": -5},
        {"message": "where can I get WIC?", "min_score": 1.5},
        {"message": "where can I get WIC?", "recency_bias": "NaN"},
        {"message": "where can I get WIC?", "recency_half_life_days": "Infinity"},
    ],
)
def test_hostile_conversation_fields_are_refused_naming_the_field(client, body):
    response = client.post("/context", json=body)
    assert response.status_code == 422, response.text
    named = {str(loc) for err in response.json()["detail"] for loc in err["loc"]}
    assert named & set(body) - {"message"}


def test_odd_thread_ids_and_history_never_fail_the_request(client):
    for thread_id in ("\u0000", "../../etc/passwd", "😀" * 30, " "):
        response = client.post("/context", json={"message": "where can I get WIC?", "thread_id": thread_id})
        assert response.status_code == 200, response.text
    history = ["\u0000\u202e Oak Hill", "🙂" * 1000, ""] + ["WIC"] * 40
    response = client.post("/context", json={"message": "and the hours?", "history": history})
    assert response.status_code == 200, response.text
