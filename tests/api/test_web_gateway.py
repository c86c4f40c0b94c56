"""The web gateway switched on through its environment, against a stand-in search API on a real loopback socket.

The stand-in (a threaded ``http.server``) answers like a generic JSON search API, counts its calls, records the
headers it was sent, and can be told to sleep, fail or answer garbage. The app is built the way ``make serve``
builds it (``create_app``; the context service reads ``LIVEMEM_WEB_*``), over the bundled example index.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient
from support.context import INTERNAL_KEY, example_index

from livemem.answer.web import web_gateway
from livemem.errors import ConfigError
from livemem.settings import WebSettings

KEY = "sk-web-9f8e7d6c5b4a"
OPEN_QUESTION = "How does SNAP food assistance eligibility work?"
WV_QUESTION = "How does SNAP food assistance eligibility work in Fayette County?"
RESULTS = [
    {"title": "SNAP eligibility", "description": "Who can get SNAP food assistance", "url": "https://www.usda.gov/snap",
     "page_age": "2026-05-01"},
    {"title": "SNAP giveaway", "description": "Free SNAP food assistance cards", "url": "https://win.example.com/snap"},
    {"title": "Not a web page", "description": "SNAP food assistance", "url": "javascript:alert(1)"},
]  # fmt: skip


class StandIn:
    """A search API on 127.0.0.1: ``mode`` is ok, sleep, http500, garbage or huge."""

    def __init__(self) -> None:
        self.calls = 0
        self.requests: list[dict] = []
        self.mode = "ok"
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep the test output quiet
                pass

            def do_GET(self) -> None:
                stand_in.calls += 1
                parts = urlsplit(self.path)
                stand_in.requests.append({"path": parts.path, "query": parse_qs(parts.query),
                                          "headers": dict(self.headers)})  # fmt: skip
                if stand_in.mode == "sleep":
                    time.sleep(5)
                status, body = 200, json.dumps({"web": {"results": RESULTS}}).encode()
                if stand_in.mode == "http500":
                    status, body = 500, json.dumps({"error": f"bad key {KEY}"}).encode()  # an API echoing the key
                elif stand_in.mode == "garbage":
                    body = b"<html>not json</html>"
                elif stand_in.mode == "huge":
                    body = b"[" + b"0," * 2_000_000 + b"0]"
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(OSError):  # the client gave up (timeout, size limit)
                    self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/search"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def home(tmp_path_factory, embedder):
    return example_index(tmp_path_factory)


@pytest.fixture
def stand_in():
    server = StandIn()
    yield server
    server.close()


@pytest.fixture
def app_with_env(home, embedder, monkeypatch, tmp_path):
    """Builds the serving app after setting the given ``LIVEMEM_WEB_*`` variables (none: the default)."""
    from serving.app import create_app
    from serving.settings import Settings

    for name in ("LIVEMEM_WEB_URL", "LIVEMEM_WEB_KEY", "LIVEMEM_WEB_ROLES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LIVEMEM_WARM_UP", "false")  # warm-up questions would call the stand-in too
    monkeypatch.setenv("LIVEMEM_AUDIT_DIR", str(tmp_path / "audit"))

    def build(**env: str):
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return create_app(Settings(index_dir=home.root, warm_up=False, api_keys={INTERNAL_KEY: "internal"}), embedder)

    return build


def web_env(stand_in: StandIn, **more: str) -> dict[str, str]:
    return {
        "LIVEMEM_WEB_URL": stand_in.url,
        "LIVEMEM_WEB_KEY": KEY,
        "LIVEMEM_WEB_RESULTS_PATH": "web.results",
        "LIVEMEM_WEB_FIELDS": json.dumps({"snippet": "description", "published_at": "page_age"}),
        "LIVEMEM_WEB_DENIED_DOMAINS": "example.com",
        **more,
    }


def test_off_by_default(app_with_env, stand_in):
    assert web_gateway(WebSettings.from_mapping({})) is None
    with TestClient(app_with_env()) as client:
        body = client.post("/context", json={"message": OPEN_QUESTION}).json()
    assert body["web"] == [] and body["route"]["web"]["reason"] == "excluded: the web gateway is disabled"
    assert stand_in.calls == 0


def test_switched_on_results_flow_into_context_and_chat_but_never_for_wv(
    app_with_env, stand_in, tmp_path, caplog
):  # fmt: skip
    caplog.set_level(logging.DEBUG)
    with TestClient(app_with_env(**web_env(stand_in))) as client:
        body = client.post("/context", json={"message": OPEN_QUESTION}).json()
        assert [w["url"] for w in body["web"]] == ["https://www.usda.gov/snap"]
        assert body["web"][0] | {"ref": None} == {
            "title": "SNAP eligibility", "snippet": "Who can get SNAP food assistance", "url": "https://www.usda.gov/snap",
            "source": "www.usda.gov", "published_at": "2026-05-01", "ref": None,
        }  # fmt: skip
        assert "Web results (not authoritative)" in body["prompt"]["context"]
        route = body["route"]["web"]
        assert route["admitted"] is True and "web" in body["route"]["sources_queried"]
        excluded = {e["url"]: e["reason"] for e in route["calls"][0]["excluded"]}
        assert excluded == {"https://win.example.com/snap": "denied domain example.com",
                            "javascript:alert(1)": "not an http(s) URL"}  # fmt: skip
        sent = stand_in.requests[0]
        assert sent["query"]["q"] == [OPEN_QUESTION] and sent["headers"]["Authorization"] == f"Bearer {KEY}"

        chat = client.post("/chat", json={"message": "What documents prove SNAP eligibility?"}).json()
        assert [w["url"] for w in chat["evidence"]["web"]] == ["https://www.usda.gov/snap"]
        calls = stand_in.calls
        for wv in (WV_QUESTION, "SNAP office hours in Beckley WV"):
            scoped = client.post("/context", json={"message": wv}).json()
            assert scoped["web"] == [] and scoped["route"]["web"]["reason"].startswith("excluded: West-Virginia")
        profiled = client.post("/context", json={"message": "food bank hours", "profile": {"state": "WV"}}).json()
        assert profiled["route"]["web"]["reason"].startswith("excluded: West-Virginia")
        assert stand_in.calls == calls, "a West-Virginia-scoped question reached the web provider"
        responses = body, chat, scoped, profiled
    audit = "".join(f.read_text() for f in (tmp_path / "audit").glob("*.jsonl"))
    assert OPEN_QUESTION in audit  # the call is audited ...
    for text in (*map(json.dumps, responses), audit, caplog.text):
        assert KEY not in text  # ... and the key is nowhere


@pytest.mark.parametrize(
    ("mode", "note"),
    [
        ("sleep", "did not answer within 0.5 s"),
        ("http500", "answered HTTP 500"),
        ("garbage", "answered something that is not JSON"),
        ("huge", "answered more than 2000000 bytes"),
        ("closed", "could not be reached (ConnectError)"),
    ],
)
def test_provider_failures_are_a_clear_note_never_a_5xx_or_a_hang(app_with_env, stand_in, caplog, mode, note):
    caplog.set_level(logging.DEBUG)
    stand_in.mode = mode
    url = stand_in.url
    if mode == "closed":
        with socket.socket() as s:  # a port nobody listens on
            s.bind(("127.0.0.1", 0))
            url = f"http://127.0.0.1:{s.getsockname()[1]}/search"
    with TestClient(app_with_env(**web_env(stand_in, LIVEMEM_WEB_URL=url, LIVEMEM_WEB_TIMEOUT_S="0.5"))) as client:
        client.post("/context", json={"message": WV_QUESTION})  # loads the index: the timing below is the web's
        started = time.monotonic()
        response = client.post("/context", json={"message": OPEN_QUESTION})
        took = time.monotonic() - started
        chat = client.post("/chat", json={"message": "Who is eligible for SNAP food assistance?"})
        stand_in.mode = "ok"  # the provider is back: a failed call was not cached, the same question gets results
        again = client.post("/context", json={"message": OPEN_QUESTION}).json()
    assert response.status_code == 200 and chat.status_code == 200
    assert took < 2.5, f"the request waited {took:.1f} s on a provider that sleeps 5 s (timeout 0.5 s)"
    web = response.json()["route"]["web"]
    assert response.json()["web"] == [] and web["admitted"] is False
    assert web["reason"] == f"no web results: http-json:127.0.0.1 {note}"
    assert response.json()["unstructured"], "the index still answers"
    assert KEY not in response.text + chat.text + caplog.text
    assert again["cached"] is False and bool(again["web"]) is (mode != "closed")


def test_rate_limit_and_bad_configuration(app_with_env, stand_in):
    with TestClient(app_with_env(**web_env(stand_in, LIVEMEM_WEB_CALLS_PER_MINUTE="1"))) as client:
        first = client.post("/context", json={"message": OPEN_QUESTION}).json()
        second = client.post("/context", json={"message": "Who is eligible for SNAP food assistance?"}).json()
    assert first["web"] and second["web"] == []
    assert second["route"]["web"]["reason"] == "no web results: rate limit: more than 1 calls a minute"
    assert stand_in.calls == 1
    for env, problem in (
        ({"LIVEMEM_WEB_URL": "ftp://search.example.org"}, r"must be an http\(s\) URL"),
        ({"LIVEMEM_WEB_URL": stand_in.url, "LIVEMEM_WEB_TIMEOUT_S": "soon"}, "LIVEMEM_WEB_TIMEOUT_S must be"),
        ({"LIVEMEM_WEB_URL": stand_in.url, "LIVEMEM_WEB_FIELDS": '{"body": "text"}'}, "LIVEMEM_WEB_FIELDS maps"),
    ):
        with pytest.raises(ConfigError, match=problem):
            web_gateway(WebSettings.from_mapping(env))
