"""Crisis messages at every door (docs/crisis.md): /chat, /context, /v1/chat/completions (streamed or not), MCP
``chat`` and ``context``, a seed route; with and without a language model. What a person sees: the crisis lines
first, in their language, then the local programs they asked for; an everyday message sharing crisis words gets
its ordinary answer and no crisis lines; a crisis message leaves no usage trace."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import anyio
import pytest
from fastapi.testclient import TestClient
from support.context import example_index, make_app, serve_handler

from livemem.settings import ContextSettings

# message, kind, a number its lines must give, the heading's first words
CRISES = [
    ("I'm going to hurt myself", "suicide_self_harm", "988", "You don't have to go through this alone"),
    ("my husband is beating me right now", "violence_abuse", "1-800-799-7233", "Your safety comes first"),
    ("quiero morirme", "suicide_self_harm", "oprima 2", "No tiene que pasar por esto solo"),
    ("I took too many pills", "overdose_poisoning", "1-800-222-1222", "This may be an emergency"),
]
CONTROL = "my electric bill is killing me, where can I get help in Beckley"
BECKLEY = "I feel like killing myself, where can I get help in Beckley"
CRISIS_NUMBERS = ("988", "1-800-799-7233", "1-800-222-1222", "1-844-435-7498", "1-800-422-4453")


@pytest.fixture(scope="module")
def home(tmp_path_factory, embedder):
    return example_index(tmp_path_factory)


@pytest.fixture(scope="module")
def client(home, embedder):
    with TestClient(make_app(home, embedder)) as c:
        yield c


def lines_first(answer: str, heading: str, number: str) -> None:
    """The answer opens with the crisis heading and its lines, the number among them (before anything else)."""
    assert answer.startswith(heading), answer[:200]
    block = answer.split("\n\n")[0]
    assert number in block, block


def test_chat_puts_the_crisis_lines_first_in_the_persons_language(client):
    for message, kind, number, heading in CRISES:
        body = client.post("/chat", json={"message": message}).json()
        route = body["route"]
        assert route["response_class"] == "redirect" and route["crisis"]["kind"] == kind, (message, route["reason"])
        assert route["crisis"]["language"] == ("es" if message == "quiero morirme" else "en")
        assert all(line["number"] in body["answer"] for line in route["crisis"]["lines"])
        lines_first(body["answer"], heading, number)
        assert body["guardrail"]["crisis_lines"] == "first"
    spanish = client.post("/chat", json={"message": "quiero morirme"}).json()["answer"]
    assert "Llame o envíe un mensaje de texto al 988" in spanish and "HELP4WV" in spanish


def test_the_lines_match_the_kind(client):
    beaten = client.post("/chat", json={"message": "my husband is beating me right now"}).json()["answer"]
    assert "text START to 88788" in beaten and "911" in beaten.split("\n\n")[0] and "988" not in beaten
    pills = client.post("/chat", json={"message": "I took too many pills"}).json()["answer"].split("\n\n")[0]
    assert "Poison Control" in pills and "911" in pills and "not breathing" in pills
    baby = client.post("/chat", json={"message": "my baby is not breathing"}).json()
    assert baby["route"]["crisis"]["kind"] == "child_in_danger"
    assert "911" in baby["answer"].split("\n")[1] and "1-800-422-4453" in baby["answer"]


def test_the_local_programs_still_follow_the_lines(client):
    body = client.post("/chat", json={"message": BECKLEY}).json()
    route = body["route"]
    assert route["response_class"] == "redirect" and route["crisis"]["kind"] == "suicide_self_harm"
    lines_first(body["answer"], "You don't have to go through this alone", "988")
    assert "1-844-435-7498" in body["answer"].split("\n\n")[0]  # the home state's own line (HELP4WV)
    rest = body["answer"].split("\n\n", 1)[1]
    assert "Raleigh Community Health Center" in rest, rest  # the Beckley clinic offering behavioral health
    assert any(c["id"] == "ral-clinic-beckley" for c in body["citations"])
    assert route["web"]["reason"] == "excluded: a crisis message is never sent to the web"


def test_an_everyday_message_with_crisis_words_gets_its_ordinary_answer(client):
    body = client.post("/chat", json={"message": CONTROL}).json()
    assert body["route"]["crisis"] is None and body["route"]["response_class"] in ("answer", "negotiate")
    assert "utility_assistance" in body["route"]["filters"].get("resource_type", [])
    assert not any(number in body["answer"] for number in CRISIS_NUMBERS), body["answer"]
    assert any(c["kind"] == "registry" for c in body["citations"])


def test_context_route_says_it(client):
    for message, kind, _, _ in CRISES:
        route = client.post("/context", json={"message": message}).json()["route"]
        assert route["response_class"] == "redirect" and route["crisis"]["kind"] == kind
        assert route["crisis"]["matched_by"] in ("lexicon", "similarity") and route["crisis"]["lines"]
    assert client.post("/context", json={"message": CONTROL}).json()["route"]["crisis"] is None


def test_openai_compatible_endpoint_streamed_or_not(client):
    for message, _, number, heading in CRISES:
        ask = {"model": "living-memory", "messages": [{"role": "user", "content": message}]}
        whole = client.post("/v1/chat/completions", json=ask).json()
        lines_first(whole["choices"][0]["message"]["content"], heading, number)
        assert whole["living_memory"]["route"]["crisis"]["kind"]
        with client.stream("POST", "/v1/chat/completions", json={**ask, "stream": True}) as r:
            deltas = [
                delta
                for line in r.iter_lines()
                if line.startswith("data: {")
                for choice in json.loads(line[6:]).get("choices") or []
                if (delta := (choice.get("delta") or {}).get("content"))
            ]
        lines_first("".join(deltas), heading, number)


def test_seed_route(client):
    for message, _, number, heading in CRISES:
        body = client.post("/chat/sync", json={"message": message, "role": "community"}).json()
        lines_first(body["answer"], heading, number)
    control = client.post("/chat/sync", json={"message": CONTROL, "role": "community"}).json()
    assert not any(number in control["answer"] for number in CRISIS_NUMBERS)


@pytest.fixture(scope="module")
def state(home, embedder, tmp_path_factory):
    from serving.services.context import ContextService
    from serving.settings import Settings
    from serving.state import ServingState

    traces = tmp_path_factory.mktemp("crisis-traces")
    state = ServingState.from_settings(Settings(index_dir=home.root, warm_up=False, traces_path=traces), embedder)
    state.context_service = ContextService(state, ContextSettings(warm_up=False))
    return state


def mcp_call(state, name: str, arguments: dict) -> dict:
    from mcp import Client

    from serving.mcp import build_server

    async def run():
        async with Client(build_server(state, operator_roles=())) as c:
            return await c.call_tool(name, arguments)

    result = anyio.run(run)
    assert not result.is_error, result.content
    return result.structured_content


def test_mcp_chat_and_context_and_no_trace_of_the_words(state):
    for message, kind, number, heading in CRISES:
        said = mcp_call(state, "chat", {"message": message})
        lines_first(said["answer"], heading, number)
        assert mcp_call(state, "context", {"message": message})["route"]["crisis"]["kind"] == kind
    mcp_call(state, "chat", {"message": CONTROL})
    state.traces.flush()
    events = [
        json.loads(line)
        for path in Path(state.settings.traces_path).glob("*.jsonl")
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
    traced = [e.get("query") for e in events if e.get("event") == "retrieval"]  # usage traces, not audit records
    assert CONTROL in traced  # an everyday question is traced as before
    for message, *_ in CRISES:  # as before they were answered with evidence: no usage trace holds a crisis message
        assert message not in traced


class QuietLLM:
    """A model that never names a crisis line: whole answers and streams of ``TOKENS``."""

    TOKENS = ("Here are ", "some programs ", "near you [1].")

    def __init__(self) -> None:
        self.streamed = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                if not body.get("stream"):
                    data = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                                       "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                           "role": "assistant", "content": "".join(fake.TOKENS)}}]}).encode()  # fmt: skip
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for token in fake.TOKENS:
                    chunk = {"choices": [{"index": 0, "delta": {"content": token}, "finish_reason": None}]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                last = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
                self.wfile.write(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())

            def log_message(self, *args) -> None:
                pass

        self.server, self.url = serve_handler(Handler)


@pytest.fixture(scope="module")
def quiet():
    fake = QuietLLM()
    yield fake
    fake.server.shutdown()


def test_a_language_model_never_answers_a_crisis_without_the_lines_first(home, embedder, quiet):
    settings = {"llm_base_url": quiet.url, "llm_model": "quiet", "llm_retries": 0}
    with TestClient(make_app(home, embedder, **settings)) as c:
        for message, _, number, heading in CRISES:
            body = c.post("/chat", json={"message": message}).json()
            assert body["backend"] in ("llm", "fixed")
            lines_first(body["answer"], heading, number)
        body = c.post("/chat", json={"message": BECKLEY}).json()
        assert body["backend"] == "llm" and body["answer"].endswith("Here are some programs near you [1].")
        lines_first(body["answer"], "You don't have to go through this alone", "988")
        ask = {"model": "living-memory", "messages": [{"role": "user", "content": BECKLEY}], "stream": True}
        with c.stream("POST", "/v1/chat/completions", json=ask) as r:
            deltas = [
                delta
                for line in r.iter_lines()
                if line.startswith("data: {")
                for choice in json.loads(line[6:]).get("choices") or []
                if (delta := (choice.get("delta") or {}).get("content"))
            ]
        assert deltas[0].startswith("You don't have to go through this alone") and "988" in deltas[0]
        assert deltas[1:] == list(QuietLLM.TOKENS)  # the model's tokens only after the lines
        control = c.post("/chat", json={"message": CONTROL}).json()
        assert control["answer"] == "".join(QuietLLM.TOKENS) and control["route"]["crisis"] is None
