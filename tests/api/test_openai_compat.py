"""The OpenAI API as OpenAI clients use it: the real `openai` package against a real uvicorn server on a free port
(in this process, so the session's embedding model is shared): models, Bearer keys, streaming (an LLM's tokens as
they come; extractive answers in pieces), usage, history, and options honoured or refused."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler

import httpx
import openai
import pytest
from support.context import INTERNAL_KEY, example_index, make_app, serve_handler
from support.serving import serve


@pytest.fixture(scope="module")
def home(tmp_path_factory, embedder):
    return example_index(tmp_path_factory)


class StreamingLLM:
    """A real HTTP server speaking /v1/chat/completions with and without ``stream``. A streamed answer stops
    after its first two tokens until ``gate`` is set, so a test can see them arrive before the answer is done."""

    TOKENS = ("The Fayette ", "LIEAP intake ", "helps with ", "heating bills [1].")

    def __init__(self) -> None:
        self.tokens = self.TOKENS
        self.gate = threading.Event()
        self.requests: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                fake.requests.append(body)
                if not body.get("stream"):
                    data = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                                       "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                           "role": "assistant", "content": "".join(fake.tokens)}}]}).encode()  # fmt: skip
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for i, token in enumerate(fake.tokens):
                    if i == 2:
                        fake.gate.wait(timeout=20)
                    chunk = {"choices": [{"index": 0, "delta": {"content": token}, "finish_reason": None}]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                last = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
                self.wfile.write(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())

            def log_message(self, *args) -> None:
                pass

        self.server, self.url = serve_handler(Handler)


@pytest.fixture(scope="module")
def extractive_server(home, embedder):
    with serve(make_app(home, embedder)) as url:
        yield url


def client(url: str, key: str = "public") -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=f"{url}/v1", max_retries=0, timeout=60)


def test_models_list_and_bearer_keys_set_the_role(extractive_server):
    url = extractive_server
    internal = client(url, INTERNAL_KEY)
    assert [m.id for m in internal.models.list()] == ["living-memory", "extractive"]  # the name the examples use
    assert internal.models.retrieve("extractive").object == "model"
    assert internal.models.retrieve("living-memory").id == "living-memory"  # issue 49: it was a 404
    with pytest.raises(openai.NotFoundError):
        internal.models.retrieve("gpt-4o")
    with pytest.raises(openai.AuthenticationError) as bad:
        client(url, "not-a-key").models.list()
    assert bad.value.status_code == 401 and bad.value.code == "invalid_api_key"
    raw = httpx.get(f"{url}/v1/models", headers={"Authorization": "Bearer not-a-key"})
    assert set(raw.json()["error"]) == {"message", "type", "param", "code"}
    assert raw.headers["WWW-Authenticate"].startswith('Bearer realm="living-memory"')  # a 401 says how (RFC 9110)
    assert raw.json()["error"]["type"] == "authentication_error"

    ask = {"model": "living-memory", "messages": [{"role": "user", "content": "caseworker escalation for SNAP"}]}
    by_bearer = internal.chat.completions.create(**ask).model_extra["living_memory"]
    by_header = httpx.post(f"{url}/v1/chat/completions", json=ask, headers={"X-API-Key": INTERNAL_KEY}).json()
    as_public = client(url).chat.completions.create(**ask).model_extra["living_memory"]
    eligible = by_bearer["route"]["eligibility"]
    assert eligible["role"] == "internal" and "internal_playbooks" in eligible["collections"]
    assert by_header["living_memory"]["route"]["eligibility"] == eligible
    assert as_public["route"]["eligibility"]["role"] == "public"
    assert "internal_playbooks" not in as_public["route"]["eligibility"]["collections"]


def test_extractive_answer_streams_in_pieces_with_usage(extractive_server):
    ask = {"model": "living-memory", "messages": [{"role": "user", "content": "food pantry in Beckley"}]}
    whole = client(extractive_server).chat.completions.create(**ask)
    assert whole.model == "extractive"  # the model that answered, not the name asked for
    chunks = list(
        client(extractive_server).chat.completions.create(**ask, stream=True, stream_options={"include_usage": True})
    )
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(texts) >= 3 and "".join(texts) == whole.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant" and {c.model for c in chunks} == {"extractive"}
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finish] == ["stop"]
    assert finish[0].model_extra["living_memory"]["citations"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    with httpx.stream("POST", f"{extractive_server}/v1/chat/completions", json={**ask, "stream": True}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]" and all(line.startswith("data: ") for line in lines)
    assert '"usage"' not in "".join(lines)  # no usage unless asked for


def test_llm_tokens_are_forwarded_as_they_come(home, embedder):
    llm = StreamingLLM()
    app = make_app(home, embedder, llm_base_url=llm.url, llm_model="fake-model", llm_retries=0)
    try:
        with serve(app) as url:
            api = client(url)
            assert [m.id for m in api.models.list()] == ["living-memory", "fake-model", "extractive"]
            stream = api.chat.completions.create(
                model="fake-model",
                messages=[{"role": "user", "content": "Where can a grandmother in ZIP 25840 get utility assistance?"}],
                stream=True,
                temperature=0.3,
                max_tokens=50,
            )
            role = next(stream)  # the role only, as OpenAI's first chunk
            assert role.choices[0].delta.role == "assistant" and not role.choices[0].delta.content
            first = next(stream)
            second = next(stream)
            # The backend is still holding the rest of its answer back: these came as it produced them.
            assert not llm.gate.is_set()
            assert first.choices[0].delta.content + second.choices[0].delta.content == "The Fayette LIEAP intake "
            llm.gate.set()
            rest = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in [first, second, *rest] if c.choices)
        assert text == "".join(StreamingLLM.TOKENS) and {c.model for c in [role, first, *rest]} == {"fake-model"}
        living = rest[-1].model_extra["living_memory"]
        assert rest[-1].choices[0].finish_reason == "stop" and [c["n"] for c in living["citations"]] == [1]
        assert living["options"]["temperature"] == {"value": 0.3, "applied": True}
        sent = llm.requests[-1]
        assert sent["stream"] is True and sent["temperature"] == 0.3 and sent["max_tokens"] == 50
    finally:
        llm.gate.set()
        llm.server.shutdown()


def test_history_options_and_refusals(extractive_server):
    api = client(extractive_server)
    follow_up = api.chat.completions.create(
        model="living-memory",
        messages=[
            {"role": "user", "content": "Is there a food pantry in Beckley?"},
            {"role": "assistant", "content": "Yes: ..."},
            {"role": "user", "content": "what are the hours?"},
        ],
    )
    living = follow_up.model_extra["living_memory"]
    history = living["options"]["history"]
    assert history["earlier_user_turns"] == 1 and history["place_from_earlier_turn"] == "Beckley"
    assert "pantry" in history["topic_from_earlier_turn"]
    assert living["route"]["filters"]["county"] == ["Raleigh"]
    assert living["evidence"]["registry"] and {r["county"] for r in living["evidence"]["registry"]} == {"Raleigh"}

    short = api.chat.completions.create(
        model="living-memory",
        messages=[{"role": "user", "content": "food pantry in Beckley"}],
        max_tokens=5,
        temperature=0.7,
        extra_body={"metadata_x": 1},
    )
    assert short.choices[0].finish_reason == "length" and short.usage.completion_tokens == 5
    options = short.model_extra["living_memory"]["options"]
    assert options["max_tokens"]["applied"] is True and options["temperature"]["applied"] is False
    assert "extractive" in options["temperature"]["why"] and options["metadata_x"]["applied"] is False

    for unsupported, named in (({"n": 2}, "n=2"), ({"tools": [{"type": "function", "function": {"name": "f"}}]},
                                                   "tools")):  # fmt: skip
        with pytest.raises(openai.BadRequestError) as refused:
            api.chat.completions.create(
                model="living-memory", messages=[{"role": "user", "content": "SNAP"}], **unsupported
            )
        assert named in refused.value.message
    with pytest.raises(openai.BadRequestError) as hot:
        api.chat.completions.create(model="living-memory", messages=[{"role": "user", "content": "x"}], temperature=9)
    assert hot.value.param == "temperature"
    with pytest.raises(openai.NotFoundError):
        api.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "SNAP"}])
    with pytest.raises(openai.PermissionDeniedError) as wider:  # a persona narrows the key's access, never widens
        api.chat.completions.create(
            model="living-memory",
            messages=[{"role": "user", "content": "SNAP"}],
            extra_body={"living_memory": {"persona": "caseworker"}},
        )
    assert "needs access internal" in wider.value.message


def test_a_streamed_leak_is_cut_before_it_is_complete(home, embedder):
    """A model "remembering" internal text while answering a public caller: the stream stops before the 8th word
    that only the internal collection holds, and says why."""
    llm = StreamingLLM()
    leak = "Per policy: Do not copy passages from this document into public guides or share them [1]."
    llm.tokens = tuple(word + " " for word in leak.split())
    llm.gate.set()
    app = make_app(home, embedder, llm_base_url=llm.url, llm_model="fake-model", llm_retries=0)
    try:
        with serve(app) as url:
            chunks = list(
                client(url).chat.completions.create(
                    model="living-memory",
                    messages=[
                        {"role": "user", "content": "Where can a grandmother in ZIP 25840 get utility assistance?"}
                    ],
                    stream=True,
                )
            )
    finally:
        llm.server.shutdown()
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "Do not copy passages from this document into public" not in text
    assert text.endswith("not available at your access level.")
    last = [c for c in chunks if c.choices and c.choices[0].finish_reason][-1]
    assert last.choices[0].finish_reason == "content_filter"
    assert last.model_extra["living_memory"]["guardrail"]["action"].startswith("blocked")


def test_no_published_index_is_a_503_in_openai_shape(tmp_path, embedder):
    from fastapi.testclient import TestClient

    from serving.app import create_app
    from serving.settings import Settings

    with TestClient(create_app(Settings(index_dir=tmp_path / "empty", warm_up=False), embedder)) as c:
        r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "SNAP"}]})
    assert r.status_code == 503 and r.json()["error"]["type"] == "api_error"
    assert str(tmp_path) not in r.text  # no server paths
