"""Access logs (issue 49: "logs are plain uvicorn lines with no request id"): every request at every door is one JSON
line (method, path, status, duration_ms, request_id, and the trace's id when it emitted a usage trace), and its
``X-Request-ID`` (a sane one as sent, else a fresh one) comes back on the response, errors and streams included."""

from __future__ import annotations

import io
import json
import logging
import re

import httpx
import pytest
from fastapi.testclient import TestClient
from support.context import INTERNAL_KEY, example_index, make_app
from support.serving import serve

from livemem.usage.traces import trace_key
from serving.logs import MAX_REQUEST_ID, json_formatter

FRESH = re.compile(r"[0-9a-f]{32}")  # uuid4().hex
ASK = {"model": "living-memory", "messages": [{"role": "user", "content": "food pantry in Beckley"}]}
CONTEXT = {"message": "Oak Hill WV county benefits", "county": "Fayette"}


@pytest.fixture(scope="module")
def home(tmp_path_factory, embedder):
    return example_index(tmp_path_factory)


@pytest.fixture(scope="module")
def app(home, embedder):
    app = make_app(home, embedder)

    @app.get("/test-only/boom", include_in_schema=False)
    def boom() -> None:
        raise RuntimeError("an unhandled error, for the 500 below")

    return app


@pytest.fixture(scope="module")
def client(app):
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


@pytest.fixture
def logged():
    """The access log's lines as the project's JSON formatter writes them, parsed (each must be one JSON object)."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(json_formatter())
    logger = logging.getLogger("livemem.access")
    logger.addHandler(handler)
    try:
        yield lambda: [json.loads(line) for line in buffer.getvalue().splitlines()]
    finally:
        logger.removeHandler(handler)


def one_line(lines: list[dict], request_id: str) -> dict:
    found = [line for line in lines if line.get("request_id") == request_id]
    assert len(found) == 1, lines
    return found[0]


def test_the_request_id_is_echoed_on_every_route_and_status(client, logged) -> None:
    calls = [
        ("GET", "/healthz", {}, 200),
        ("GET", "/metrics", {}, 200),
        ("GET", "/no/such/route", {}, 404),
        ("POST", "/context", {"json": {"message": 7}}, 422),
        ("POST", "/query", {"json": {"query": "food"}, "headers": {"X-API-Key": "not-a-key"}}, 401),
        ("POST", "/context", {"content": b"{" + b" " * (3 << 20) + b"}"}, 413),
        ("GET", "/test-only/boom", {}, 500),
        ("POST", "/v1/chat/completions", {"json": {"model": "living-memory"}}, 400),
    ]
    for i, (method, path, extra, status) in enumerate(calls):
        rid = f"req-{i}-{path}"
        headers = {"X-Request-ID": rid, **extra.pop("headers", {})}
        r = client.request(method, path, headers=headers, **extra)
        assert r.status_code == status, (path, r.status_code, r.text[:200])
        assert r.headers["X-Request-ID"] == rid, path
        line = one_line(logged(), rid)
        assert (line["method"], line["path"], line["status"]) == (method, path, status)
    with client.stream(
        "POST", "/v1/chat/completions", json={**ASK, "stream": True}, headers={"X-Request-ID": "s1"}
    ) as r:
        assert r.headers["content-type"].startswith("text/event-stream") and r.headers["X-Request-ID"] == "s1"
        body = "".join(r.iter_text())
    assert body.rstrip().endswith("data: [DONE]")
    line = one_line(logged(), "s1")
    assert line["status"] == 200 and line["path"] == "/v1/chat/completions"


def test_a_missing_or_insane_request_id_is_replaced_by_a_fresh_one(client, logged) -> None:
    kept = "a" * MAX_REQUEST_ID
    assert client.get("/healthz", headers={"X-Request-ID": kept}).headers["X-Request-ID"] == kept
    seen = set()
    for bad in [None, "", "a" * (MAX_REQUEST_ID + 1), "tab\there", "caf\u00e9".encode("latin-1"), b"\x7fdel"]:
        r = client.get("/healthz", headers={} if bad is None else {"X-Request-ID": bad})
        assert r.status_code == 200
        given = r.headers["X-Request-ID"]
        assert FRESH.fullmatch(given), (bad, given)
        assert one_line(logged(), given)["status"] == 200  # the log names the id the caller got back
        seen.add(given)
    assert len(seen) == 6  # fresh each time


def test_a_log_line_is_one_json_object_with_the_fields(client, logged) -> None:
    r = client.get("/healthz?who=someone%20private", headers={"X-Request-ID": "fields-1"})
    assert r.status_code == 200
    line = one_line(logged(), "fields-1")
    assert {"method", "path", "status", "duration_ms", "request_id", "event", "level", "timestamp"} <= line.keys()
    assert line["path"] == "/healthz" and "private" not in json.dumps(line)  # never the query string
    assert isinstance(line["status"], int) and isinstance(line["duration_ms"], float) and line["duration_ms"] >= 0
    assert line["logger"] == "livemem.access" and line["level"] == "info" and line["event"] == "request"
    assert "trace_id" not in line  # /healthz emits no usage trace
    assert not logging.getLogger("livemem.access").propagate  # one line a request, whatever the root logger does


def test_the_trace_id_of_a_context_chat_or_query_answer_is_in_its_line(client, logged) -> None:
    for i, (path, body) in enumerate([("/context", CONTEXT), ("/chat", CONTEXT), ("/query", {"query": "food pantry"})]):
        r = client.post(path, json=body, headers={"X-Request-ID": f"traced-{i}", "X-API-Key": INTERNAL_KEY})
        assert r.status_code == 200, r.text[:300]
        line = one_line(logged(), f"traced-{i}")
        # the key the trace and audit files name it by: the uuid that begins the signed trace id
        assert line["trace_id"] == trace_key(r.json()["trace_id"]), path


def test_a_real_server_echoes_the_id_on_a_stream_and_on_metrics(home, embedder) -> None:
    with serve(make_app(home, embedder)) as url, httpx.Client(base_url=url, timeout=60) as http:
        assert http.get("/metrics", headers={"X-Request-ID": "m-1"}).headers["x-request-id"] == "m-1"
        assert FRESH.fullmatch(http.get("/nope").headers["x-request-id"])
        with http.stream("POST", "/v1/chat/completions", json={**ASK, "stream": True},
                         headers={"X-Request-ID": "stream-1"}) as r:  # fmt: skip
            assert r.status_code == 200 and r.headers["x-request-id"] == "stream-1"
            assert [line for line in r.iter_lines() if line][-1] == "data: [DONE]"


def test_the_mcp_door_echoes_the_id_and_logs_the_request(home, embedder, logged) -> None:
    from livemem.settings import ContextSettings
    from serving.mcp import build_server, http_app
    from serving.services.context import ContextService
    from serving.settings import Settings
    from serving.state import ServingState

    state = ServingState.from_settings(Settings(index_dir=home.root, warm_up=False), embedder)
    state.context_service = ContextService(state, ContextSettings(warm_up=False))
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}  # fmt: skip
    accept = {"Accept": "application/json, text/event-stream"}
    # the Host the server expects (MCP's DNS-rebinding protection refuses others)
    with TestClient(http_app(build_server(state, operator_roles=())), base_url="http://127.0.0.1:8765") as mcp:
        r = mcp.post("/mcp", json=initialize, headers={**accept, "X-Request-ID": "mcp-1"})
        assert r.status_code == 200 and r.headers["X-Request-ID"] == "mcp-1"
        bad = mcp.post("/mcp", content=b"not json", headers={**accept, "Content-Type": "application/json"})
        assert bad.status_code >= 400 and FRESH.fullmatch(bad.headers["X-Request-ID"])
    line = one_line(logged(), "mcp-1")
    assert (line["method"], line["path"], line["status"]) == ("POST", "/mcp", 200)


def test_an_mcp_tool_call_logs_its_trace_id(home, embedder, logged) -> None:
    """The MCP library answers a tool call in its session's task, started by the session's first request, not in
    the HTTP request's: the tool's usage trace must still land in the line of the request that called it (the SDK
    runs each message's handler in the contextvars of the request that sent it, ``REQUEST_TRACES`` included)."""
    from livemem.settings import ContextSettings
    from serving.mcp import build_server, http_app
    from serving.services.context import ContextService
    from serving.settings import Settings
    from serving.state import ServingState

    state = ServingState.from_settings(Settings(index_dir=home.root, warm_up=False), embedder)
    state.context_service = ContextService(state, ContextSettings(warm_up=False))
    accept = {"Accept": "application/json, text/event-stream"}
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}  # fmt: skip
    with TestClient(http_app(build_server(state, operator_roles=())), base_url="http://127.0.0.1:8765") as mcp:
        r = mcp.post("/mcp", json=initialize, headers=accept)
        assert r.status_code == 200, r.text
        session = {**accept, "Mcp-Session-Id": r.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-06-18"}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert mcp.post("/mcp", json=initialized, headers=session).is_success
        results = {}
        for i, (tool, arguments) in enumerate([("query", {"query": "food pantry"}), ("context", {"message": "SNAP"})]):
            params = {"name": tool, "arguments": arguments}
            call = {"jsonrpc": "2.0", "id": 2 + i, "method": "tools/call", "params": params}
            r = mcp.post("/mcp", json=call, headers={**session, "X-Request-ID": f"mcp-tool-{i}"})
            assert r.status_code == 200, r.text
            data = [line[5:] for line in r.text.splitlines() if line.startswith("data:")] or [r.text]
            result = json.loads(data[-1])["result"]
            assert not result.get("isError"), result
            results[i] = result["structuredContent"]["trace_id"]
    for i, trace_id in results.items():
        line = one_line(logged(), f"mcp-tool-{i}")
        assert line["trace_id"] == trace_key(trace_id), line
