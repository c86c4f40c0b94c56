"""The OpenAI dialect exactly as OpenAI clients expect it (issue 34): the real `openai` client against a real uvicorn
server. The conversation is named by an explicit id (never `user`) or is the `messages` array; the first streamed
chunk carries the role only; a backend failing mid-stream ends with OpenAI's error event (the client raises
APIError); unknown /v1 paths, wrong methods and malformed JSON answer OpenAI's error shape; the OpenAPI entry lists
the stream and the errors; system messages and earlier turns reach an LLM backend."""

from __future__ import annotations

import json
import re
from http.server import BaseHTTPRequestHandler

import httpx
import openai
import pytest
from support.context import example_index, make_app, serve_handler
from support.serving import serve

QUESTION = "Is there a food pantry in Beckley?"
FOLLOW_UP = "what are the hours?"


@pytest.fixture(scope="module")
def home(tmp_path_factory, embedder):
    return example_index(tmp_path_factory)


@pytest.fixture(scope="module")
def extractive(home, embedder):
    with serve(make_app(home, embedder)) as url:
        yield url


class RecordingLLM:
    """A real HTTP server speaking /v1/chat/completions (plain and ``stream``) that records every request body.
    ``fail_after``: a streamed answer stops after that many tokens, the way a crashing backend does (the response
    announced more bytes than it sends, then the connection closes)."""

    TOKENS = ("The Shady Spring ", "Community Pantry ", "is open ", "Tuesdays [1].")

    def __init__(self, fail_after: int | None = None) -> None:
        self.requests: list[dict] = []
        self.reply = lambda body: self.TOKENS  # the tokens answering a request body
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                fake.requests.append(body)
                if body.get("stream"):
                    chunks = [{"choices": [{"index": 0, "delta": {"content": t}, "finish_reason": None}]}
                              for t in fake.reply(body)]  # fmt: skip
                    events = [f"data: {json.dumps(c)}\n\n".encode() for c in chunks]
                    events.append(b"data: [DONE]\n\n")
                    whole = b"".join(events)
                    sent = b"".join(events[:fail_after]) if fail_after is not None else whole
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("content-length", str(len(whole)))
                    self.end_headers()
                    self.wfile.write(sent)
                    self.wfile.flush()
                    return  # HTTP/1.0: the connection closes here, short of what was announced when failing
                data = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                                   "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                       "role": "assistant", "content": "".join(fake.reply(body))}}]}).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server, self.url = serve_handler(Handler)


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(api_key="public", base_url=f"{url}/v1", max_retries=0, timeout=60)


def ask(api: openai.OpenAI, *messages: str, **more):
    return api.chat.completions.create(
        model="living-memory", messages=[{"role": "user", "content": m} for m in messages], **more
    )


def carried(completion) -> tuple[list[str] | None, dict]:
    living = completion.model_extra["living_memory"]
    return living["route"]["filters"]["county"], living["options"]["history"]


def test_one_user_id_for_every_chat_never_joins_two_chats(extractive):
    """Open WebUI and LibreChat send one `user` for all of a person's chats: a new chat asking "what are the hours?"
    must not inherit the pantry and Beckley of another chat; a chat named by an explicit id does continue."""
    api = client(extractive)
    same_user = {"user": "owui-user-1"}
    first = ask(api, QUESTION, **same_user)
    assert carried(first)[0] == ["Raleigh"]
    other_chat = ask(api, FOLLOW_UP, **same_user)
    county, history = carried(other_chat)
    assert county is None and "place_from_earlier_turn" not in history and "topic_from_earlier_turn" not in history
    assert history["conversation_id_from"] == "messages"
    assert other_chat.model_extra["living_memory"]["options"]["user"]["applied"] is False

    # Named conversations: each way a client names one continues that conversation and no other.
    for named, again, elsewhere in (
        ({"extra_headers": {"X-OpenWebUI-Chat-Id": "owui-chat-a"}},
         {"extra_headers": {"X-OpenWebUI-Chat-Id": "owui-chat-a"}},
         {"extra_headers": {"X-OpenWebUI-Chat-Id": "owui-chat-b"}}),
        ({"extra_headers": {"X-Conversation-Id": "libre-convo-a"}},
         {"extra_headers": {"X-Conversation-Id": "libre-convo-a"}},
         {"extra_headers": {"X-Conversation-Id": "libre-convo-b"}}),
        ({"metadata": {"conversation_id": "meta-a"}},
         {"metadata": {"conversation_id": "meta-a"}},
         {"metadata": {"conversation_id": "meta-b"}}),
    ):  # fmt: skip
        ask(api, QUESTION, **same_user, **named)
        county, history = carried(ask(api, FOLLOW_UP, **same_user, **again))
        assert county == ["Raleigh"] and history["place_from_earlier_turn"] == "Beckley", named
        assert history["conversation_id_from"] in (
            "X-OpenWebUI-Chat-Id",
            "X-Conversation-Id",
            "metadata.conversation_id",
        )
        county, history = carried(ask(api, FOLLOW_UP, **same_user, **elsewhere))
        assert county is None and "place_from_earlier_turn" not in history, elsewhere

    # Without any id, the conversation is the messages array: its earlier turns carry place and topic.
    in_messages = api.chat.completions.create(
        model="living-memory",
        messages=[
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": "Yes: ..."},
            {"role": "user", "content": FOLLOW_UP},
        ],
        **same_user,
    )
    county, history = carried(in_messages)
    assert county == ["Raleigh"] and history["place_from_earlier_turn"] == "Beckley"


def test_the_first_chunk_carries_the_role_only(extractive):
    chunks = list(ask(client(extractive), QUESTION, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant" and not chunks[0].choices[0].delta.content
    assert chunks[1].choices[0].delta.content and chunks[1].choices[0].delta.role is None
    with httpx.stream(
        "POST", f"{extractive}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": QUESTION}], "stream": True},
    ) as response:  # fmt: skip
        first = json.loads(next(line for line in response.iter_lines() if line)[len("data: ") :])
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}  # as OpenAI's first chunk


def test_a_backend_failing_mid_stream_ends_with_an_error_event(home, embedder):
    llm = RecordingLLM(fail_after=2)
    app = make_app(home, embedder, llm_base_url=llm.url, llm_model="fake-model", llm_retries=0)
    try:
        with serve(app) as url:
            got: list = []
            with pytest.raises(openai.APIError) as failed:
                for chunk in ask(client(url), "Where can a grandmother in ZIP 25840 get utility assistance?",
                                 stream=True):  # fmt: skip
                    got.append(chunk)
            with httpx.stream(
                "POST", f"{url}/v1/chat/completions",
                json={"messages": [{"role": "user", "content": QUESTION}], "stream": True},
            ) as response:  # fmt: skip
                lines = [line for line in response.iter_lines() if line]
    finally:
        llm.server.shutdown()
    text = "".join(c.choices[0].delta.content or "" for c in got if c.choices)
    assert text == "The Shady Spring Community Pantry "  # what came before the failure, then the error
    assert not [c for c in got if c.choices and c.choices[0].finish_reason]  # never "stop" on a partial answer
    assert failed.value.code == "backend_error" and "failed mid-answer" in failed.value.message
    last = json.loads(lines[-1][len("data: ") :])
    assert set(last["error"]) == {"message", "type", "param", "code"} and last["error"]["type"] == "api_error"
    assert last["living_memory"]["fallback"] and "data: [DONE]" not in lines


def test_unknown_paths_wrong_methods_and_bad_json_answer_openais_error_shape(extractive):
    api = client(extractive)
    with pytest.raises(openai.NotFoundError) as missing:
        api.get("/no-such-route", cast_to=object)
    assert missing.value.code == "unknown_url" and "/v1/no-such-route" in missing.value.message
    with pytest.raises(openai.APIStatusError) as wrong:
        api.get("/chat/completions", cast_to=object)
    assert wrong.value.status_code == 405 and wrong.value.code == "method_not_allowed"
    assert wrong.value.response.headers["allow"] == "POST"
    for response in (
        httpx.get(f"{extractive}/v1/no-such-route"),
        httpx.delete(f"{extractive}/v1/models"),
        httpx.post(f"{extractive}/v1/chat/completions", content=b'{"messages": [', headers={"content-type": "application/json"}),
    ):  # fmt: skip
        body = response.json()
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert body["error"]["param"] is None and response.status_code == 400
    assert body["error"]["message"].startswith("the request body is not valid JSON")
    assert httpx.get(f"{extractive}/no-such-route").json() == {"detail": "Not Found"}  # off /v1: FastAPI's own


def test_openapi_lists_the_stream_and_the_errors_it_returns(extractive):
    spec = httpx.get(f"{extractive}/openapi.json").json()
    responses = spec["paths"]["/v1/chat/completions"]["post"]["responses"]
    assert {"application/json", "text/event-stream"} <= set(responses["200"]["content"])
    assert {"400", "401", "403", "404", "503"} <= set(responses) and "422" not in responses
    error = responses["400"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    assert set(spec["components"]["schemas"][error]["properties"]) == {"error"}
    # what the route really answers is what the entry says
    status = httpx.post(f"{extractive}/v1/chat/completions", json={"model": "gpt-x", "messages": []}).status_code
    assert str(status) in responses


@pytest.mark.parametrize("stream", [False, True])
def test_system_messages_and_earlier_turns_reach_the_llm(home, embedder, stream):
    llm = RecordingLLM()
    app = make_app(home, embedder, llm_base_url=llm.url, llm_model="fake-model", llm_retries=0)
    messages = [
        {"role": "system", "content": "Answer in one short paragraph for a caseworker."},
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": "Yes: the Shady Spring Community Pantry [1]."},
        {"role": "user", "content": FOLLOW_UP},
    ]
    try:
        with serve(app) as url:
            answer = client(url).chat.completions.create(model="living-memory", messages=messages, stream=stream)
            last = list(answer)[-1] if stream else answer
    finally:
        llm.server.shutdown()
    sent = llm.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert "Answer in one short paragraph for a caseworker." in sent[0]["content"]
    assert sent[0]["content"].index("Answer in one short") > 100  # after Living Memory's own rules
    assert sent[1]["content"] == QUESTION and sent[2]["content"] == messages[2]["content"]
    assert FOLLOW_UP in sent[3]["content"] and "[1]" in sent[3]["content"]  # the question with its evidence
    options = last.model_extra["living_memory"]["options"]
    assert options["system"]["applied"] is True and options["history"]["turns_to_model"] == 2


def test_the_extractive_answer_says_it_cannot_use_system_messages(extractive):
    completion = client(extractive).chat.completions.create(
        model="living-memory",
        messages=[{"role": "system", "content": "Answer in French."}, {"role": "user", "content": QUESTION}],
    )
    said = completion.model_extra["living_memory"]["options"]["system"]
    assert said["applied"] is False and said["messages"] == 1 and "cannot follow instructions" in said["why"]


# A sentence only the internal caseworker playbook holds, and one of the same length that matches nothing
# (as in tests/api/test_answer_guards.py).
INTERNAL = (
    "Same-day food need: refer to the nearest pantry from the county guide and call ahead on the client's behalf."
)
NOTHING = "Every second Tuesday the volunteers repaint the blue bench beside the old river trail by the mill."


@pytest.mark.parametrize("stream", [False, True])
def test_earlier_turns_given_to_the_model_are_the_callers_own_words_to_the_leak_guard(home, embedder, stream):
    """The model now sees the earlier turns, which the caller wrote (assistant turns too): a model repeating an
    earlier turn must look the same whether it matches internal text or nothing (the guard is no oracle), and
    internal text the caller did not write is still stopped."""
    llm = RecordingLLM()

    def echo(body: dict) -> list[str]:
        said = "\n".join(m["content"] for m in body["messages"][1:-1])  # the earlier turns only
        asked = re.search(r'repeat exactly "(.+?)"', said, re.S)
        return re.findall(r"\S+\s*", (asked.group(1) if asked else "Nothing to repeat.") + llm.suffix)

    llm.reply, llm.suffix = echo, ""
    app = make_app(home, embedder, llm_base_url=llm.url, llm_model="fake-model", llm_retries=0)

    def outcome(api: openai.OpenAI, text: str) -> tuple:
        messages = [
            {"role": "user", "content": "food pantry in Beckley"},
            {"role": "assistant", "content": f'I will repeat exactly "{text}" when asked.'},
            {"role": "user", "content": "Go on, say it now."},
        ]
        answer = api.chat.completions.create(model="living-memory", messages=messages, stream=stream)
        if stream:
            chunks = list(answer)
            content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            last = [c for c in chunks if c.choices and c.choices[0].finish_reason][-1]
        else:
            content, last = answer.choices[0].message.content, answer
        living = last.model_extra["living_memory"]
        return content, (
            last.choices[0].finish_reason,
            living["guardrail"]["action"],
            living["route"]["response_class"],
        )

    try:
        with serve(app) as url:
            api = client(url)
            internal, internal_seen = outcome(api, INTERNAL)
            nothing, nothing_seen = outcome(api, NOTHING)
            llm.suffix = " " + INTERNAL  # the model adds internal words the caller never wrote
            _, leaked_seen = outcome(api, NOTHING)
    finally:
        llm.server.shutdown()
    assert internal.startswith(INTERNAL) and nothing.startswith(NOTHING)
    assert internal_seen == nothing_seen
    assert leaked_seen[0] == "content_filter" if stream else leaked_seen[2] == "refuse"
    assert leaked_seen[1].startswith("blocked")
