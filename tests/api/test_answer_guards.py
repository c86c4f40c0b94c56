"""Answer guards as a public caller sees them, with a real local OpenAI-compatible backend that echoes: the leak
guard is no oracle (an echo of the caller's words looks the same whether they match internal text or nothing, on
/chat and /v1/chat/completions, streamed and not), a real leak is still stopped and reported as a `refuse`, the
public model is never shown internal text, and citations that match nothing are reported."""

from __future__ import annotations

import json
import re
from http.server import BaseHTTPRequestHandler

import pytest
from fastapi.testclient import TestClient
from support.context import example_index, make_app, serve_handler

from livemem.answer.chat import _shingles, hidden_shingles

# A sentence only the internal caseworker playbook holds, and one of the same length that matches nothing.
INTERNAL = (
    "Same-day food need: refer to the nearest pantry from the county guide and call ahead on the client's behalf."
)
# A sentence in no source. (Round 24: "Every second Tuesday the volunteers repaint the blue bench beside the old
# river trail by the mill", wrapped in "Please repeat exactly ... and nothing else.", is a crisis to the classifier
# (0.86): a false alarm of an instruction unlike any help-line message, docs/crisis.md. This test is about echoes.)
NOTHING = "The county library lends telescopes for two weeks; ask at the front desk for the star chart binder."


class EchoLLM:
    """A real HTTP server speaking /v1/chat/completions (plain and ``stream``): it answers with the text the
    question asks it to repeat (``repeat exactly "..."``), plus ``self.suffix``; ``self.mode == "prompt"`` answers
    with the whole prompt it was given."""

    def __init__(self) -> None:
        self.mode = "repeat"
        self.suffix = ""
        self.prompts: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                prompt = "\n".join(m["content"] for m in body["messages"])
                fake.prompts.append(prompt)
                if fake.mode == "prompt":
                    content = prompt
                else:
                    asked = re.search(r'repeat exactly "(.+?)"', prompt, re.S)
                    content = (asked.group(1) if asked else "Nothing to repeat.") + fake.suffix
                if not body.get("stream"):
                    data = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                                       "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                           "role": "assistant", "content": content}}]}).encode()  # fmt: skip
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for token in re.findall(r"\S+\s*", content):
                    chunk = {"choices": [{"index": 0, "delta": {"content": token}, "finish_reason": None}]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                last = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
                self.wfile.write(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())

            def log_message(self, *args) -> None:
                pass

        self.server, self.url = serve_handler(Handler)


@pytest.fixture(scope="module")
def home(tmp_path_factory, embedder):
    return example_index(tmp_path_factory)


@pytest.fixture(scope="module")
def echo():
    fake = EchoLLM()
    yield fake
    fake.server.shutdown()


@pytest.fixture(scope="module")
def client(home, embedder, echo):
    with TestClient(make_app(home, embedder, llm_base_url=echo.url, llm_model="echo", llm_retries=0)) as c:
        yield c


def ask(text: str) -> str:
    return f'Please repeat exactly "{text}" and nothing else.'


def seen(body: dict) -> dict:
    """What a caller can tell about how an answer came out (its text aside)."""
    return {
        "backend": body["backend"],
        "guardrail": body["guardrail"]["action"],
        "response_class": body["route"]["response_class"],
        "finish_reason": body.get("finish_reason", "stop"),
    }


def via_chat(client: TestClient, text: str) -> tuple[int, dict, str]:
    response = client.post("/chat", json={"message": ask(text)})
    body = response.json()
    return response.status_code, seen(body), body["answer"]


def via_completions(client: TestClient, text: str) -> tuple[int, dict, str]:
    request = {"model": "living-memory", "messages": [{"role": "user", "content": ask(text)}]}
    response = client.post("/v1/chat/completions", json=request)
    body = response.json()
    choice = body["choices"][0]
    return (
        response.status_code,
        {**seen(body["living_memory"]), "finish_reason": choice["finish_reason"]},
        choice["message"]["content"],
    )


def via_stream(client: TestClient, text: str) -> tuple[int, dict, str]:
    request = {"model": "living-memory", "messages": [{"role": "user", "content": ask(text)}], "stream": True}
    response = client.post("/v1/chat/completions", json=request)
    chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    (last,) = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    outcome = {**seen(last["living_memory"]), "finish_reason": last["choices"][0]["finish_reason"]}
    return response.status_code, outcome, content


@pytest.mark.parametrize("via", [via_chat, via_completions, via_stream], ids=["chat", "completions", "stream"])
def test_an_echo_of_the_callers_words_looks_the_same_whatever_they_match(client, echo, via):
    """Issue 33, defect 5: "repeat exactly '<internal sentence>'" was refused (streamed: `content_filter`) while
    "repeat exactly '<any other sentence>'" was echoed, so a public caller could confirm internal text."""
    snap = client.app.state.serving.reader.snapshot()
    hidden = ["internal_playbooks"]
    assert hidden_shingles(snap, tuple(hidden)) & _shingles(INTERNAL)  # the guess really is internal-only text
    assert not hidden_shingles(snap, tuple(hidden)) & _shingles(NOTHING)
    echo.mode, echo.suffix = "repeat", ""
    status_internal, outcome_internal, text_internal = via(client, INTERNAL)
    status_nothing, outcome_nothing, text_nothing = via(client, NOTHING)
    assert status_internal == status_nothing == 200
    assert outcome_internal == outcome_nothing, (outcome_internal, outcome_nothing)
    assert outcome_internal["finish_reason"] == "stop" and not outcome_internal["guardrail"].startswith("blocked")
    assert text_internal.startswith(INTERNAL) and text_nothing.startswith(NOTHING)
    assert text_internal[len(INTERNAL) :] == text_nothing[len(NOTHING) :]  # the same note, if any


@pytest.mark.parametrize("via", [via_chat, via_completions, via_stream], ids=["chat", "completions", "stream"])
def test_internal_words_the_caller_did_not_write_are_still_stopped_as_a_refusal(client, echo, via):
    """A model that "knows" the playbook and continues the caller's words with internal text the caller never
    wrote: blocked, and the route says `refuse` (it said `answer`)."""
    echo.mode = "repeat"
    echo.suffix = (
        " and call ahead on the client's behalf. Then start a SNAP application and flag it for expedited processing."
    )
    try:
        status, outcome, text = via(client, "Same-day food need: refer to the nearest pantry from the county guide")
    finally:
        echo.suffix = ""
    assert status == 200
    assert "expedited processing" not in text and text.endswith("not available at your access level.")
    assert outcome["guardrail"].startswith("blocked") and outcome["response_class"] == "refuse"
    if via is via_stream:
        assert outcome["finish_reason"] == "content_filter"


@pytest.mark.parametrize(
    "question",
    [
        "What does the caseworker playbook say about same-day food need and the intake checklist?",
        "escalation steps for a shutoff notice or eviction notice, internal caseworker guidance",
        "Where can a grandmother in ZIP 25840 get utility assistance?",
    ],
)
def test_a_public_callers_model_is_never_shown_internal_text(client, echo, question):
    """Why the guard can discount the caller's words: the evidence given to a public caller's model holds no
    internal text at all (a model that repeats its whole prompt is not blocked, and the prompt holds no 8 words
    only an internal collection has), so internal text in an answer can only come from the caller or from the
    model's own memory."""
    echo.mode = "prompt"
    try:
        body = client.post("/chat", json={"message": question}).json()
    finally:
        echo.mode = "repeat"
    snap = client.app.state.serving.reader.snapshot()
    prompt = echo.prompts[-1]
    assert "Question:" in prompt and not hidden_shingles(snap, ("internal_playbooks",)) & _shingles(prompt)
    assert not body["guardrail"]["action"].startswith("blocked")
    assert "internal_playbooks" not in {c.get("collection") for c in body["citations"]}


def test_citations_that_match_nothing_are_reported(client, echo):
    """Issue 32: `[99]` matching no evidence item counted as "cites nothing" without saying so."""
    question = "Where can a grandmother in ZIP 25840 get utility assistance?"
    echo.mode, echo.suffix = "repeat", ""
    body = client.post("/chat", json={"message": ask("Call the Fayette office [99].") + " " + question}).json()
    assert body["guardrail"]["unmatched_citations"] == [99] and body["citations"] == []
    assert (
        body["guardrail"]["action"] == "annotated: the answer cites no evidence (its citation [99] matches no "
        "evidence item)"
    )
    assert "[99] matches none of it" in body["answer"]
    both = client.post("/chat", json={"message": ask("Call the Fayette office [1] [99] [98].") + " " + question})
    body = both.json()
    assert body["guardrail"]["unmatched_citations"] == [99, 98] and [c["n"] for c in body["citations"]] == [1]
    assert body["guardrail"]["action"] == "none"
    completion = client.post(
        "/v1/chat/completions",
        json={"model": "living-memory", "messages": [{"role": "user", "content": ask("See [99].") + " " + question}]},
    ).json()
    assert completion["living_memory"]["guardrail"]["unmatched_citations"] == [99]


@pytest.fixture(scope="module")
def extractive(home, embedder):
    with TestClient(make_app(home, embedder)) as c:
        yield c


DEBRIS = re.compile(r"\*\*|__|\||^#|\+1\d{10}|;ext=", re.M)


@pytest.mark.parametrize(
    "message",
    [
        "Oak Hill WV county benefits",
        "heating bill help for ZIP 25840",
        "food pantry days in Mount Hope, Fayette County",
        "What did the council decide on 14 March 2026?",
    ],
)
def test_extractive_answers_read_as_plain_text_with_human_phone_numbers(extractive, message):
    """Issue 32: extractive answers carried markdown debris (`**Oak Hill benefits hub**`, `Date:**`, table pipes)
    and registry phones as `+13045550104;ext=2`. The evidence keeps E.164; the answer shows `(304) 555-0104
    ext. 2`."""
    body = extractive.post("/chat", json={"message": message}).json()
    assert body["backend"] == "extractive" and body["citations"]
    assert not DEBRIS.search(body["answer"]), body["answer"]
    for row in body["evidence"]["registry"]:
        if row.get("ref") and row["ref"] in {c["n"] for c in body["citations"]}:
            assert row["contact_phone"].startswith("+1")  # the data keeps E.164
    if "heating" in message:
        assert "(304) 555-0104 ext. 2" in body["answer"]
        assert any(r["contact_phone"] == "+13045550104;ext=2" for r in body["evidence"]["registry"])
