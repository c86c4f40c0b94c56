"""The MCP server's tools through the mcp package's own client (in-process session)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import anyio
import pytest
from context_support import example_index

from livemem.context import ContextSettings


@pytest.fixture(scope="module")
def state(tmp_path_factory, embedder):
    from serving.context_service import ContextService
    from serving.settings import Settings
    from serving.state import ServingState

    home = example_index(tmp_path_factory)
    state = ServingState.from_settings(Settings(index_dir=home.root, warm_up=False), embedder)
    state.context_service = ContextService(state, ContextSettings(warm_up=False))
    return state


@pytest.fixture(scope="module")
def server(state):
    from livemem.mcp_server import build_server

    return build_server(state)


def call(server, name: str, arguments: dict) -> dict:
    from mcp import Client

    async def run():
        async with Client(server) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert tools == {"query", "gis_query", "resources", "context", "feedback", "index_stats"}
            result = await client.call_tool(name, arguments)
            assert not result.is_error, result
            return json.loads(result.content[0].text)

    return anyio.run(run)


def test_tools(server):
    stats = call(server, "index_stats", {})
    assert "internal_playbooks" not in stats["collections"] and stats["registry_rows"] > 0
    hits = call(server, "query", {"query": "heating bill help", "top_k": 3})["results"]
    assert len(hits) == 3 and all(h["collection"] != "internal_playbooks" for h in hits)
    places = call(server, "gis_query", {"query": "benefits hub", "county": "Fayette"})["results"]
    assert places and {p["county"] for p in places} == {"Fayette"}
    rows = call(server, "resources", {"zip": "25840", "resource_type": "utility_assistance"})["results"]
    assert next(r["local_resource_id"] for r in rows) == "fay-lieap-cap"
    context = call(server, "context", {"message": "Oak Hill WV county benefits", "county": "Fayette"})
    assert context["route"]["wv_scoped"] and "Oak Hill Benefits Hub" in {e["label"] for e in context["spatial"]}
    assert "hidden_collections" not in context


def test_query_and_feedback_are_usage_traces_for_the_rollup(server, state):
    from livemem.attention import read_day

    hits = call(server, "query", {"query": "heating bill help", "top_k": 2})
    chosen = hits["results"][0]["chunk_id"]
    assert call(server, "feedback", {"trace_id": hits["trace_id"], "useful": True, "chunk_ids": [chosen]}) == {
        "trace_id": hits["trace_id"],
        "recorded": 1,
    }
    forged = call(server, "feedback", {"trace_id": hits["trace_id"][:-4] + "AAAA", "useful": True})
    assert forged["recorded"] == 0 and "unknown trace_id" in forged["error"]
    shown = {h["chunk_id"] for h in hits["results"]}
    others = call(server, "query", {"query": "Oak Hill office", "top_k": 10})["results"]
    other = next(h["chunk_id"] for h in others if h["chunk_id"] not in shown)
    foreign = call(server, "feedback", {"trace_id": hits["trace_id"], "useful": True, "chunk_ids": [other]})
    assert foreign["recorded"] == 0 and foreign["chunk_ids"] == [other]
    events = read_day(state.settings.traces_path, datetime.now(UTC).date(), UTC)
    trace = hits["trace_id"]
    assert sorted(c for t, c, _, _ in events.retrievals if t == trace) == sorted(h["chunk_id"] for h in hits["results"])
    assert (trace, chosen, True) in events.feedback


def _tool_names_over(transport: str, home, tmp_path) -> tuple[set[str], dict]:
    """Start ``python -m livemem.mcp_server`` as its own process and talk to it with the package's client."""
    import os
    import socket
    import subprocess
    import sys
    import time
    from pathlib import Path

    from mcp import ClientSession

    project = Path(__file__).resolve().parent.parent
    env = {**os.environ, "RAG_INDEX_DIR": str(home.root), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(project)}

    async def session_calls(read, write) -> tuple[set[str], dict]:
        async with ClientSession(read, write) as session:
            await session.initialize()
            names = {t.name for t in (await session.list_tools()).tools}
            result = await session.call_tool("query", {"query": "heating bill help", "top_k": 2})
            return names, json.loads(result.content[0].text)

    if transport == "stdio":
        from mcp.client.stdio import StdioServerParameters, stdio_client

        async def run():
            params = StdioServerParameters(command=sys.executable, args=["-m", "livemem.mcp_server"], env=env)
            async with stdio_client(params) as (read, write):
                return await session_calls(read, write)

        return anyio.run(run)

    from mcp.client.streamable_http import streamable_http_client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(tmp_path / "mcp-http.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "livemem.mcp_server", "--http", "--port", str(port)], env=env, stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "mcp-http.log").read_text()
            time.sleep(0.3)

        async def run():
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as streams:
                return await session_calls(streams[0], streams[1])

        return anyio.run(run)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_server_process_over_each_transport(tmp_path_factory, tmp_path, transport: str) -> None:
    home = example_index(tmp_path_factory)
    names, data = _tool_names_over(transport, home, tmp_path)
    assert names == {"query", "gis_query", "resources", "context", "feedback", "index_stats"}
    assert len(data["results"]) == 2 and all(r["collection"] != "internal_playbooks" for r in data["results"])
