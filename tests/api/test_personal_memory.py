"""Personal episodic memory through the real API and the real asset: cards searchable at once and split into
``top_k`` by ``mix``, one user's memory invisible to every other key and user id, feedback nudging one user's
ranking only, remembered exchanges, deletion hiding at once and removing physically at the next consolidation."""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import pytest
from dagster import materialize
from fastapi.testclient import TestClient
from support.locks import locks_held, postgres_table_locked, sqlite_locked
from support.serving import build_and_publish, make_workspace

from livemem import personal
from livemem.settings import ContextSettings
from livemem.version.store import IndexHome
from orchestration.assets.personal_memory import personal_memory, personal_memory_readable
from orchestration.resources import EmbedderResource, IndexStoreResource, TraceStoreResource
from serving.app import create_app
from serving.services.context import ContextService
from serving.settings import Settings

KEY_A, KEY_B = "key-of-alice-0123456789", "key-of-bob-0123456789"
ALICE, BOB = {"X-API-Key": KEY_A}, {"X-API-Key": KEY_B}
CARD = "My caseworker at the Oak Hill office is Dana Whitfield; she prefers phone calls on Tuesdays."
QUESTION = "Who is my caseworker at the Oak Hill office?"
PG_DSN = os.environ.get("LIVEMEM_TEST_PG_DSN", "postgresql://livemem:livemem@127.0.0.1:5432/livemem_test")
SNAP_CARD = "I applied for SNAP food assistance in March; my case number is 4471."
SNAP_QUESTION = "How do I apply for SNAP food assistance?"


@pytest.fixture(scope="module")
def home(tmp_path_factory, embedder) -> IndexHome:
    root = tmp_path_factory.mktemp("personal")
    home = IndexHome(root / "rag_index")
    build_and_publish(make_workspace(root), home, embedder)
    return home


@pytest.fixture(scope="module")
def client(home, embedder):
    settings = Settings(index_dir=home.root, warm_up=False, api_keys={KEY_A: "public", KEY_B: "public"})
    app = create_app(settings, embedder)
    state = app.state.serving
    state.context_service = ContextService(state, ContextSettings(warm_up=False, audit=False))
    with TestClient(app) as c:
        yield c


@pytest.fixture
def store(client, tmp_path, monkeypatch) -> Path:
    """A fresh personal-memory store for each test: the serving state's (the entry point builds it once from its
    settings and passes it down) and the consolidation asset's (which reads ``LIVEMEM_PERSONAL_DIR`` when it runs)."""
    directory = tmp_path / "personal"
    monkeypatch.setenv(personal.PERSONAL_DIR_ENV, str(directory))
    monkeypatch.delenv(personal.TRACE_DSN_ENV, raising=False)
    state = client.app.state.serving
    monkeypatch.setattr(state, "personal", replace(state.personal, directory=directory, dsn=None))
    return directory


@pytest.fixture(params=["sqlite", "postgres"])
def any_store(request, client, store, monkeypatch) -> personal.PersonalStore:
    """``store`` with its log in SQLite, then in Postgres (``RAG_TRACE_DSN``, as the traces choose; a real server:
    ``LIVEMEM_TEST_PG_DSN``, which ``.ci/run`` sets up): the store serving was given."""
    state = client.app.state.serving
    if request.param == "postgres":
        psycopg = pytest.importorskip("psycopg")
        try:
            conn = psycopg.connect(PG_DSN, connect_timeout=3, autocommit=True)
        except psycopg.Error as exc:
            pytest.skip(f"no PostgreSQL server reachable at LIVEMEM_TEST_PG_DSN ({exc.__class__.__name__}: {exc})")
        conn.execute(f"DROP TABLE IF EXISTS {personal.PERSONAL_TABLE}")
        monkeypatch.setenv(personal.TRACE_DSN_ENV, PG_DSN)  # the asset's trace_store resource reads it
        monkeypatch.setattr(state, "personal", replace(state.personal, dsn=PG_DSN))
        yield state.personal
        conn.execute(f"DROP TABLE IF EXISTS {personal.PERSONAL_TABLE}")
        conn.close()
    else:
        yield state.personal


def consolidate(home: IndexHome, **config):
    result = materialize(
        [personal_memory, personal_memory_readable],
        resources={
            "index_store": IndexStoreResource(index_dir=str(home.root)),
            "embedder": EmbedderResource(),
            "trace_store": TraceStoreResource(),
        },
        run_config={"ops": {"personal_memory": {"config": config}}} if config else None,
    )
    assert result.success
    checks = result.get_asset_check_evaluations()
    assert [c.passed for c in checks] == [True]
    return result.asset_materializations_for_node("personal_memory")[0].metadata


def context(client: TestClient, headers: dict, **body) -> dict:
    response = client.post("/context", json={"message": QUESTION, **body}, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_card_is_searchable_at_once_and_mix_splits_top_k(client, store) -> None:
    created = client.post("/memory", json={"text": SNAP_CARD}, headers=ALICE)
    assert created.status_code == 201
    card = created.json()
    assert not card["duplicate"]
    again = client.post("/memory", json={"text": "  i applied for SNAP food assistance in March;   my case number "
                                                  "is 4471.  "}, headers=ALICE)  # fmt: skip
    assert again.json() == {**card, "duplicate": True}

    plain = context(client, ALICE, message=SNAP_QUESTION, top_k=3)  # no mix, no user_id: personal memory unread
    assert plain["personal"] == [] and plain["route"]["personal"] is None
    assert len(plain["unstructured"]) == 3
    data = context(client, ALICE, message=SNAP_QUESTION, top_k=3, mix={"personal": 0.5})
    mine = data["personal"]
    assert [p["memory_id"] for p in mine] == [card["memory_id"]]
    assert mine[0]["personal"] is True and mine[0]["content"] == SNAP_CARD
    assert mine[0]["provenance"] == {"store": "personal", "memory_id": card["memory_id"], "kind": "card",
                                     "created_at": card["created_at"], "state": "pending"}  # fmt: skip
    assert [p["chunk_id"] for p in data["unstructured"]] == [p["chunk_id"] for p in plain["unstructured"][:2]]
    assert data["route"]["personal"] | {"snapshot": None} == {
        "user_id": None, "mix": 0.5, "personal_passages": 1, "corpus_passages": 2, "nudged": [], "snapshot": None,
        "pending": 1, "remembered": False,
    }  # fmt: skip
    assert "case number is 4471" in data["prompt"]["context"] and "your memory" in data["prompt"]["context"]
    cited = next(c for c in data["citations"] if c["kind"] == "memory")
    assert (cited["id"], cited["created_at"]) == (card["memory_id"], card["created_at"])


def test_no_other_key_or_user_id_ever_sees_or_deletes_it(client, store) -> None:
    card = client.post("/memory", json={"text": CARD}, headers=ALICE).json()
    first = context(client, ALICE, mix={"personal": 0.5})
    assert first["personal"] and not first["cached"]
    assert not context(client, ALICE, mix={"personal": 0.5})["cached"]  # personal answers are never cached
    assert context(client, BOB, mix={"personal": 0.5})["personal"] == []  # the same question
    assert context(client, ALICE, mix={"personal": 0.5}, user_id="household-2")["personal"] == []
    assert client.get("/memory", headers=BOB).json()["items"] == []
    assert client.delete(f"/memory/{card['memory_id']}", headers=BOB).status_code == 404
    assert client.delete(f"/memory/{card['memory_id']}", headers=ALICE, params={"user_id": "x"}).status_code == 404
    assert [i["memory_id"] for i in client.get("/memory", headers=ALICE).json()["items"]] == [card["memory_id"]]

    for response in (
        client.post("/memory", json={"text": "anonymous"}),
        client.post("/memory", json={"text": "public"}, headers={"X-API-Key": "public"}),
        client.get("/memory"),
        client.delete("/memory"),
        client.post("/context", json={"message": QUESTION, "mix": {"personal": 0.3}}),
    ):
        assert response.status_code == 401, response.text
        assert "API key" in response.json()["detail"]
    assert client.post("/memory", json={"text": "x"}, headers={"X-API-Key": "not-a-key"}).status_code == 401
    assert client.post("/memory", json={"text": "x", "user_id": "a b"}, headers=ALICE).status_code == 422
    assert context(client, ALICE, mix={"personal": 0.5})["personal"][0]["memory_id"] == card["memory_id"]


def test_feedback_nudges_the_ranking_of_that_user_only(client, store) -> None:
    message = "SNAP food assistance applications"
    first = context(client, ALICE, message=message, user_id="me", top_k=4)
    top = first["unstructured"][0]
    before_bob = context(client, BOB, message=message, user_id="me", top_k=4)
    for _ in range(3):  # three votes, bounded at two: the factor stays 0.5
        sent = {"trace_id": first["trace_id"], "chunk_ids": [top["chunk_id"]], "useful": False, "personal": True,
                "user_id": "me"}  # fmt: skip
        assert client.post("/feedback", json=sent, headers=ALICE).status_code == 200

    after = context(client, ALICE, message=message, user_id="me", top_k=4)
    moved = next(p for p in after["unstructured"] if p["chunk_id"] == top["chunk_id"])
    assert moved["score"] == pytest.approx(top["score"] * 0.5)
    assert after["unstructured"][0]["chunk_id"] != top["chunk_id"]
    assert after["route"]["personal"]["nudged"] == [{"chunk_id": top["chunk_id"], "factor": 0.5}]
    assert client.get("/memory", headers=ALICE, params={"user_id": "me"}).json()["feedback"] == [
        {"chunk_id": top["chunk_id"], "votes": -3, "factor": 0.5}
    ]
    bob = context(client, BOB, message=message, user_id="me", top_k=4)
    assert [p["chunk_id"] for p in bob["unstructured"]] == [p["chunk_id"] for p in before_bob["unstructured"]]
    assert [p["chunk_id"] for p in context(client, ALICE, message=message, top_k=4)["unstructured"]] == [
        p["chunk_id"] for p in first["unstructured"]
    ]  # without user_id: Alice's key-level memory, which has no votes

    anonymous = {"trace_id": first["trace_id"], "chunk_ids": [top["chunk_id"]], "useful": True, "personal": True}
    assert client.post("/feedback", json=anonymous).status_code == 401
    foreign = {**anonymous, "chunk_ids": ["0" * 8 + "-0000-0000-0000-" + "0" * 12]}
    assert client.post("/feedback", json=foreign, headers=ALICE).status_code == 400


def test_exchanges_are_remembered_only_on_request(client, store) -> None:
    context(client, ALICE, message="Where do I renew Medicaid in Fayette County?")
    assert client.get("/memory", headers=ALICE).json()["items"] == []
    chat = client.post(
        "/chat", json={"message": "Where do I renew Medicaid in Fayette County?", "remember": True}, headers=ALICE
    )
    assert chat.status_code == 200
    items = client.get("/memory", headers=ALICE).json()["items"]
    assert [i["kind"] for i in items] == ["exchange"]
    assert items[0]["content"].startswith("You asked: Where do I renew Medicaid in Fayette County?\nAnswer: ")
    later = context(client, ALICE, message="what did I ask about Medicaid renewal?", mix={"personal": 0.3})
    assert [p["kind"] for p in later["personal"]] == ["exchange"]


def test_openai_clients_use_it_through_living_memory_options(client, store) -> None:
    card = client.post("/memory", json={"text": SNAP_CARD, "user_id": "u1"}, headers=ALICE).json()
    body = {"messages": [{"role": "user", "content": SNAP_QUESTION}],
            "living_memory": {"mix": {"personal": 0.3}, "user_id": "u1", "remember": True}}  # fmt: skip
    response = client.post("/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY_A}"})
    assert response.status_code == 200, response.text
    extra = response.json()["living_memory"]
    assert [p["memory_id"] for p in extra["evidence"]["personal"]] == [card["memory_id"]]
    items = client.get("/memory", headers=ALICE, params={"user_id": "u1"}).json()["items"]
    assert [i["kind"] for i in items] == ["card", "exchange"]
    anonymous = client.post("/v1/chat/completions", json=body)
    assert anonymous.status_code == 401 and "API key" in anonymous.json()["error"]["message"]


def test_deletion_hides_at_once_and_is_physical_after_consolidation(client, any_store, home) -> None:
    store = any_store.directory
    alice = client.post("/memory", json={"text": CARD}, headers=ALICE).json()
    bob_text = "Bob keeps his LIHEAP letters in the blue folder."
    client.post("/memory", json={"text": bob_text}, headers=BOB)
    meta = consolidate(home)
    assert meta["dagster/row_count"].value == 2 and meta["embedded"].value == 2
    listed = client.get("/memory", headers=ALICE).json()
    assert [(i["memory_id"], i["state"]) for i in listed["items"]] == [(alice["memory_id"], "consolidated")]
    assert listed["snapshot"] == meta["snapshot"].value
    assert context(client, ALICE, mix={"personal": 0.5})["personal"][0]["provenance"]["state"] == "consolidated"

    deleted = client.delete("/memory", headers=ALICE)
    assert deleted.status_code == 200 and deleted.json()["deleted"] == "all"
    assert client.get("/memory", headers=ALICE).json()["items"] == []
    assert context(client, ALICE, mix={"personal": 0.5})["personal"] == []  # not served from the answer cache
    assert contains(store, "Dana Whitfield")  # still on disk until the consolidation

    meta = consolidate(home)
    assert meta["dagster/row_count"].value == 1 and meta["embedded"].value == 0  # Bob's vector is reused
    assert not contains(store, "Dana Whitfield")
    assert contains(store, "blue folder")
    assert [i["content"] for i in client.get("/memory", headers=BOB).json()["items"]] == [bob_text]
    rows = personal.log_for(store, any_store.dsn).rows()
    assert [(r["kind"], r["body"]) for r in rows] == [("card", {"text": bob_text})]
    assert len(list((store / personal.SNAPSHOTS).glob("*.npz"))) == 1


def test_a_store_locked_elsewhere_is_a_503_then_works_again(client, any_store) -> None:
    """Personal memory whose store another holder keeps locked (SQLite: an exclusive transaction; Postgres: a table
    lock) answers 503 with Retry-After once the store's own timeout passes (SQLite's busy timeout, Postgres'
    statement_timeout), never hangs or crashes, and takes the card once the lock is gone."""
    assert client.post("/memory", json={"text": CARD}, headers=ALICE).status_code == 201  # the store exists
    log = personal.log_for(any_store.directory, any_store.dsn)
    if isinstance(log, personal.PostgresPersonalLog):
        log.statement_timeout_s = 0.5  # for connections opened from now on
        hold = postgres_table_locked(PG_DSN, personal.PERSONAL_TABLE)
    else:
        hold = sqlite_locked(any_store.directory / personal.LOG_FILE)
    with locks_held(hold) as (answer, _):  # a request that waits for good fails the test instead of hanging it
        refused = answer(partial(client.post, "/memory", json={"text": "Ask about the LIHEAP letter."}, headers=ALICE))
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1", refused.text
    assert "try again" in refused.json()["detail"]
    later = client.post("/memory", json={"text": "Ask about the LIHEAP letter."}, headers=ALICE)
    assert later.status_code == 201, later.text


def test_a_full_memory_refuses_new_cards(client, store, monkeypatch) -> None:
    monkeypatch.setattr(personal.writes, "MAX_ITEMS", 2)  # where the writes check it
    for text in ("one", "two"):
        assert client.post("/memory", json={"text": text}, headers=ALICE).status_code == 201
    full = client.post("/memory", json={"text": "three"}, headers=ALICE)
    assert full.status_code == 409 and "delete some" in full.json()["detail"]
    assert client.post("/memory", json={"text": "Two"}, headers=ALICE).json()["duplicate"]


def test_concurrent_appends_are_all_kept_in_order(any_store) -> None:
    def append(n: int) -> None:
        for i in range(25):
            personal.add_feedback(any_store.directory, f"user-{n}", [f"chunk-{i}"], useful=True, dsn=any_store.dsn)

    threads = [threading.Thread(target=append, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = personal.log_for(any_store.directory, any_store.dsn).rows()
    assert len(rows) == 8 * 25 and len({r["id"] for r in rows}) == len(rows)
    for n in range(8):  # each writer's rows in the order it wrote them
        assert [r["item_id"] for r in rows if r["user"] == f"user-{n}"] == [f"chunk-{i}" for i in range(25)]


def contains(store: Path, text: str) -> bool:
    """Whether any byte of the store (log, WAL, snapshots) still holds ``text`` (UTF-8 or numpy's UTF-32)."""
    needles = (text.encode("utf-8"), text.encode("utf-32-le"))
    return any(n in f.read_bytes() for f in store.rglob("*") if f.is_file() for n in needles)


def test_consolidation_expires_merges_duplicates_and_applies_card_deletions(any_store, home) -> None:
    store, dsn = any_store.directory, any_store.dsn
    log = personal.log_for(store, dsn)
    old = datetime.now(UTC) - timedelta(days=40)
    log.append("u", "card", "old", {"text": "an old card"}, now=old)
    log.append("u", "card", "a", {"text": "Rent is due on the 3rd"})
    log.append("u", "card", "b", {"text": "rent is due on the 3rd "})  # a duplicate written by a racing request
    log.append("u", "card", "c", {"text": "I use the Beckley pantry"})
    log.append("u", "delete", "c", {})
    log.append("v", "feedback", "chunk-1", {"useful": True})
    meta = consolidate(home, retention_days=30)
    purged = meta["purged_log_rows"].value
    assert "| expired | 1 |" in purged and "| duplicates | 1 |" in purged and "| deleted | 1 |" in purged
    snap = personal.load_memory_snapshot(store, meta["snapshot"].value)
    assert [i["item_id"] for i in snap.items] == ["a"]
    assert snap.feedback == [{"user": "v", "chunk_id": "chunk-1", "votes": 1}]
    assert personal.read_view(store, "v", dsn=dsn).nudges() == {"chunk-1": 1.25}
    assert [i["item_id"] for i in personal.read_view(store, "u", dsn=dsn).items] == ["a"]
    assert [r["item_id"] for r in log.rows()] == ["a", "chunk-1"]


def test_the_daily_schedule_consolidates_personal_memory() -> None:
    from dagster import build_schedule_context

    from orchestration.assets.personal_memory import build_personal_memory_assets

    _, _, (job,), (schedule,) = build_personal_memory_assets()
    assert (schedule.name, schedule.cron_schedule, schedule.execution_timezone) == (
        "daily_personal_memory",
        "30 3 * * *",
        "UTC",
    )
    assert schedule.job_name == job.name == "personal_memory_job"
    requests = schedule.evaluate_tick(build_schedule_context(scheduled_execution_time=datetime(2026, 11, 23, 3, 30)))
    assert len(requests.run_requests) == 1
