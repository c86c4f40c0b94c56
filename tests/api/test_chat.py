"""/chat and /v1/chat/completions: extractive answers, a real local OpenAI-compatible backend (and its timeout),
the guardrail, and the endpoint driven by the `openai` client."""

from __future__ import annotations

import json
import re
import time
from http.server import BaseHTTPRequestHandler

import httpx
import pytest
from fastapi.testclient import TestClient
from support.context import example_index, make_app, serve_handler


@pytest.fixture(scope="module")
def home(tmp_path_factory, embedder):
    return example_index(tmp_path_factory)


class FakeLLM:
    """A real HTTP server on 127.0.0.1 speaking /v1/chat/completions; ``reply(prompt)`` decides the answer."""

    def __init__(self) -> None:
        self.delay = 0.0
        self.reply = lambda prompt: "The Fayette LIEAP intake helps with heating bills [1]."
        self.requests: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                fake.requests.append(body)
                time.sleep(fake.delay)
                content = fake.reply(body["messages"][-1]["content"])
                data = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                                   "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                                "finish_reason": "stop"}]}).encode()  # fmt: skip
                try:
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (timeout test)

            def log_message(self, *args) -> None:
                pass

        self.server, self.url = serve_handler(Handler)


@pytest.fixture(scope="module")
def llm():
    fake = FakeLLM()
    yield fake
    fake.server.shutdown()


GRANDMOTHER = {"message": "Where can a grandmother in ZIP 25840 get utility assistance?"}


def test_extractive_answer_cites_registry_and_provenance(home, embedder):
    with TestClient(make_app(home, embedder)) as c:
        body = c.post("/chat", json=GRANDMOTHER).json()
    assert body["backend"] == "extractive" and body["fallback"] is None and body["note"].startswith("Extractive")
    assert "Fayette LIEAP Intake" in body["answer"]
    cited = {(c["kind"], c["id"]) for c in body["citations"]}
    assert ("registry", "fay-lieap-cap") in cited
    for citation in body["citations"]:
        assert f"[{citation['n']}]" in body["answer"]
        if citation["kind"] == "chunk":
            assert re.fullmatch(r"[0-9a-f]{40}", citation["provenance"]["commit"])
    assert body["route"]["wv_scoped"] and body["trace_id"] and body["guardrail"]["action"] == "none"


def test_llm_backend_path_and_timeout_fallback(home, embedder, llm):
    settings = {"llm_base_url": llm.url, "llm_model": "fake-model", "llm_timeout_s": 0.5, "llm_retries": 0}
    with TestClient(make_app(home, embedder, **settings)) as c:
        body = c.post("/chat", json=GRANDMOTHER).json()
        assert body["backend"] == "llm" and body["model"] == "fake-model"
        assert body["answer"].endswith("[1].") and [x["n"] for x in body["citations"]] == [1]
        sent = llm.requests[-1]["messages"]
        assert sent[0]["role"] == "system" and "mandatory and authoritative" in sent[0]["content"]
        assert "Verified programs" in sent[1]["content"] and "Question: Where can a grandmother" in sent[1]["content"]
        llm.delay = 2.0
        started = time.perf_counter()
        slow = c.post("/chat", json={"message": "heating bill help for ZIP 25840"}).json()
        llm.delay = 0.0
    assert time.perf_counter() - started < 2.0
    assert slow["backend"] == "extractive" and "timeout" in slow["fallback"]
    assert slow["answer"].startswith("The language model was unavailable") and slow["citations"]


def test_guardrail_annotates_refuses_and_blocks_leaks(home, embedder, llm):
    base = {"llm_base_url": llm.url, "llm_model": "fake-model", "llm_retries": 0}
    llm.reply = lambda prompt: "Just call someone."
    with TestClient(make_app(home, embedder, guardrail="annotate", **base)) as c:
        body = c.post("/chat", json=GRANDMOTHER).json()
    assert body["answer"].endswith("check it before relying on it.)") and body["guardrail"]["action"].startswith(
        "annotated"
    )
    with TestClient(make_app(home, embedder, guardrail="refuse", **base)) as c:
        body = c.post("/chat", json=GRANDMOTHER).json()
    assert body["answer"].startswith("I could not ground") and body["citations"] == []
    # A model that "remembers" internal text: the answer never reaches a public caller.
    llm.reply = lambda prompt: (
        "Per policy: Do not copy passages from this document into public guides or share them [1]."
    )
    with TestClient(make_app(home, embedder, **base)) as c:
        body = c.post("/chat", json=GRANDMOTHER).json()
    assert "Do not copy passages" not in body["answer"] and body["guardrail"]["action"].startswith("blocked")
    llm.reply = lambda prompt: "The Fayette LIEAP intake helps with heating bills [1]."


def test_openai_client_against_the_endpoint(home, embedder):
    openai = pytest.importorskip("openai")
    app = make_app(home, embedder)
    with TestClient(app) as tc:
        client = openai.OpenAI(api_key="public", base_url="http://testserver/v1", http_client=tc)
        completion = client.chat.completions.create(
            model="living-memory",
            messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "food pantry in Beckley"}],
            extra_body={"living_memory": {"county": "Raleigh"}},
        )
        assert completion.choices[0].message.role == "assistant"
        assert "Pantry" in completion.choices[0].message.content
        extra = completion.model_extra["living_memory"]
        assert extra["route"]["filters"]["county"] == ["Raleigh"] and extra["citations"]
        assert {r["county"] for r in extra["evidence"]["registry"]} == {"Raleigh"}
        stream = client.chat.completions.create(
            model="living-memory", messages=[{"role": "user", "content": "hello"}], stream=True
        )
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        assert text.startswith("Hello!")
        bad = tc.post("/v1/chat/completions", json={"messages": [{"role": "system", "content": "x"}]})
        assert bad.status_code == 422


def test_warm_up_fills_the_cache_for_a_new_version(home, embedder):
    app = make_app(home, embedder, warm_up=True, warm_up_questions=["How do I apply for SNAP?"])
    service = app.state.serving.context_service
    snap = app.state.serving.reader.snapshot()
    thread = service.maybe_warm_up(snap)
    thread.join(timeout=60)
    assert service.maybe_warm_up(snap) is None and service.warmed_questions == 1
    with TestClient(app) as c:
        assert c.post("/chat", json={"message": "how do I apply for SNAP?"}).json()["cached"] is True


def test_persistent_cache_tier_survives_a_new_process_state(home, embedder, tmp_path):
    path = tmp_path / "answers.sqlite"
    with TestClient(make_app(home, embedder, cache_path=path)) as c:
        assert c.post("/chat", json={"message": "WIC in Fayette County"}).json()["cached"] is False
    with TestClient(make_app(home, embedder, cache_path=path)) as c:
        assert c.post("/chat", json={"message": "WIC in Fayette County"}).json()["cached"] is True


def test_unreachable_backend_is_marked(home, embedder):
    with TestClient(make_app(home, embedder, llm_base_url="http://127.0.0.1:9/v1", llm_model="m", llm_retries=1)) as c:
        body = c.post("/chat", json=GRANDMOTHER).json()
    assert body["backend"] == "extractive" and body["fallback"] and "Fayette LIEAP" in body["answer"]
    assert httpx  # the backend is httpx-based
