"""The MCP server's tools through the mcp package's own client: schemas, structured results, errors, traces."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from support.context import PROJECT, example_index

from livemem.settings import ContextSettings
from livemem.usage.traces import trace_key

TOOLS = {
    "query", "gis_query", "resources", "context", "chat", "feedback", "facts", "sparql", "verify_chunk",
    "index_stats", "answer_cache_stats", "answer_cache_warm_up", "answer_cache_invalidate", "reindex",
    "reindex_status",
}  # fmt: skip


@pytest.fixture(scope="module")
def state(tmp_path_factory, embedder):
    from serving.services.context import ContextService
    from serving.settings import Settings
    from serving.state import ServingState

    home = example_index(tmp_path_factory)
    state = ServingState.from_settings(Settings(index_dir=home.root, warm_up=False), embedder)
    state.context_service = ContextService(state, ContextSettings(warm_up=False))
    return state


@pytest.fixture(scope="module")
def server(state):
    from serving.mcp import build_server

    return build_server(state, operator_roles=())


@pytest.fixture(scope="module")
def operator(state):
    """The same memory, as an internal role that may operate (answer cache, reindex)."""
    from serving.mcp import build_server

    return build_server(state, role="internal", operator_roles=("internal",))


def in_session(server, steps: Callable[[Any], Any]) -> Any:
    """Run ``steps(client)`` in one session of the package's in-process client."""
    from mcp import Client

    async def run():
        async with Client(server) as client:
            return await steps(client)

    return anyio.run(run)


def call(server, name: str, arguments: dict) -> dict:
    """A successful call's structured result (which its text content repeats, for older clients)."""

    async def steps(client):
        return await client.call_tool(name, arguments)

    result = in_session(server, steps)
    assert not result.is_error, result.content
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


def error_of(server, name: str, arguments: dict) -> str:
    """The message of a call that must fail as an MCP error (isError), not as a success."""

    async def steps(client):
        return await client.call_tool(name, arguments)

    result = in_session(server, steps)
    assert result.is_error and result.structured_content is None, result
    return result.content[0].text


def trace_events(state, trace_id: str) -> list[dict]:
    state.traces.flush()  # the tools queue their events (livemem.usage.traces.submit): on disk now
    events, key = [], trace_key(trace_id)  # events name a trace by its key
    for path in Path(state.settings.traces_path).glob("*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            event = json.loads(line)
            if event.get("trace_id") == key and event.get("event") == "retrieval":  # not the audit records
                events.append(event)
    return events


def test_every_tool_describes_its_arguments_and_results(server, state) -> None:
    from livemem.registry import RESOURCE_TYPES, state_counties

    async def steps(client):
        return {t.name: t for t in (await client.list_tools()).tools}

    tools = in_session(server, steps)
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description and tool.output_schema and tool.output_schema["type"] == "object", tool.name
        assert not re.search(r"\n\s", tool.description), f"{tool.name}: the docstring's indentation is sent"
        for name, prop in tool.input_schema.get("properties", {}).items():
            assert prop.get("description"), f"{tool.name}.{name} has no description"

    def arg(tool: str, name: str) -> dict:
        """The argument's schema, the null branch of an optional one left out."""
        prop = tools[tool].input_schema["properties"][name]
        branches = [b for b in prop.get("anyOf", [prop]) if b.get("type") != "null"]
        return {**prop, **branches[0]}

    assert (arg("query", "top_k")["minimum"], arg("query", "top_k")["maximum"]) == (1, 50)
    visible = state.reader.snapshot().collections_for(frozenset({"public"}))
    assert arg("query", "collections")["items"]["enum"] == visible and "internal_playbooks" not in visible
    assert arg("query", "mode")["enum"] == ["hybrid", "dense", "sparse"]
    assert arg("resources", "resource_type")["enum"] == list(RESOURCE_TYPES)
    assert arg("resources", "zip")["pattern"] == r"^\d{5}$" and arg("context", "zip")["pattern"] == r"^\d{5}$"
    counties = arg("gis_query", "county")["enum"]
    assert counties == sorted(state_counties("WV").values()) and {"Fayette", "McDowell"} <= set(counties)
    assert {"community", "researcher"} <= set(arg("chat", "persona")["enum"])
    assert arg("reindex", "job")["enum"] == ["build_index", "export_gbim", "verify_registry"]
    assert (arg("sparql", "limit")["minimum"], arg("sparql", "limit")["maximum"]) == (1, 1000)
    assert set(tools["query"].output_schema["required"]) >= {"index_version", "trace_id", "results"}
    assert tools["query"].annotations.read_only_hint and not tools["reindex"].annotations.read_only_hint


def test_tools_answer_with_structured_content(server) -> None:
    stats = call(server, "index_stats", {})
    assert "internal_playbooks" not in stats["collections"] and stats["registry_rows"] > 0
    hits = call(server, "query", {"query": "heating bill help", "top_k": 3})["results"]
    assert len(hits) == 3 and all(h["collection"] != "internal_playbooks" for h in hits)
    one = call(server, "query", {"query": "heating bill help", "top_k": 3, "collections": [hits[0]["collection"]]})
    assert one["collections"] == [hits[0]["collection"]] and {h["collection"] for h in one["results"]} == {
        hits[0]["collection"]
    }
    places = call(server, "gis_query", {"query": "benefits hub", "county": "Fayette"})["results"]
    assert places and {p["metadata"]["county"] for p in places} == {"Fayette"}
    rows = call(server, "resources", {"zip": "25840", "resource_type": "utility_assistance"})["results"]
    assert next(r["local_resource_id"] for r in rows) == "fay-lieap-cap"
    context = call(server, "context", {"message": "Oak Hill WV county benefits", "county": "Fayette"})
    assert context["route"]["wv_scoped"] and "Oak Hill Benefits Hub" in {e["label"] for e in context["spatial"]}
    assert "hidden_collections" not in context
    answer = call(server, "chat", {"message": "Where can I get help paying the heating bill in Fayette County?"})
    assert answer["answer"] and answer["citations"] and answer["backend"] == "extractive"
    community = call(server, "chat", {"message": "heating bill help in Fayette", "persona": "community"})
    assert community["answer"] and community["trace_id"] != answer["trace_id"]

    hub = next(p for p in places if p["label"] == "Oak Hill Benefits Hub")
    facts = call(server, "facts", {"entity_id": hub["entity_id"]})
    assert facts["label"] == "Oak Hill Benefits Hub"
    assert ("located_in", "Fayette") in {(r["predicate"], r["object"]) for r in facts["relations"]}
    zips = call(server, "facts", {"entity_id": hub["entity_id"], "predicate": "serves_zip"})["relations"]
    assert zips and {r["predicate"] for r in zips} == {"serves_zip"}
    found = call(
        server,
        "sparql",
        {"query": f'SELECT ?e WHERE {{ ?e rdfs:label "{hub["label"]}" }}', "limit": 5},
    )
    assert found["variables"] == ["e"] and found["rows"][0]["e"].endswith(hub["entity_id"])
    assert call(server, "sparql", {"query": "ASK { ?s ?p ?o }"})["boolean"] is True

    verified = call(server, "verify_chunk", {"chunk_id": hits[0]["chunk_id"]})
    assert verified["chunk_id"] == hits[0]["chunk_id"] and verified["verification"]["status"] == "current"


def test_errors_are_mcp_errors(server, state) -> None:
    visible = state.reader.snapshot().collections_for(frozenset({"public"}))
    unknown = error_of(server, "query", {"query": "heating", "collections": ["internal_playbooks"]})
    assert "internal_playbooks" in unknown and all(c in unknown for c in visible)
    assert "pattern" in error_of(server, "resources", {"zip": "2584"})
    assert "is in" in error_of(server, "resources", {"zip": "10001"})  # a New York ZIP: the registry covers WV
    assert "less than or equal to 50" in error_of(server, "query", {"query": "heating", "top_k": 500})
    assert "resource_type" in error_of(server, "resources", {"resource_type": "spaceships"})
    assert "no chunk" in error_of(server, "verify_chunk", {"chunk_id": "00000000-0000-4000-8000-000000000000"})
    assert "no GBIM entity" in error_of(server, "facts", {"entity_id": "00000000-0000-4000-8000-000000000000"})
    assert "not supported" in error_of(
        server, "sparql", {"query": "SELECT * WHERE { SERVICE <http://x/> { ?s ?p ?o } }"}
    )
    assert "persona" in error_of(server, "chat", {"message": "hello", "persona": "internal"})  # wider than public
    assert "may not" in error_of(server, "answer_cache_invalidate", {})


def test_every_answering_tool_writes_usage_traces_that_feedback_accepts(server, state) -> None:
    from livemem.usage.attention import read_day

    hits = call(server, "query", {"query": "heating bill help", "top_k": 2})
    chosen = hits["results"][0]["chunk_id"]
    assert call(server, "feedback", {"trace_id": hits["trace_id"], "useful": True, "chunk_ids": [chosen]}) == {
        "trace_id": hits["trace_id"],
        "recorded": 1,
    }
    assert "unknown trace_id" in error_of(
        server, "feedback", {"trace_id": hits["trace_id"][:-4] + "AAAA", "useful": True}
    )
    shown = {h["chunk_id"] for h in hits["results"]}
    others = call(server, "query", {"query": "Oak Hill office", "top_k": 10})["results"]
    other = next(h["chunk_id"] for h in others if h["chunk_id"] not in shown)
    foreign = error_of(server, "feedback", {"trace_id": hits["trace_id"], "useful": True, "chunk_ids": [other]})
    assert "not returned by this trace" in foreign and other in foreign
    events = read_day(state.settings.traces_path, datetime.now(UTC).date(), UTC)
    trace = trace_key(hits["trace_id"])  # events name a trace by its key
    assert sorted(c for t, c, _, _ in events.retrievals if t == trace) == sorted(shown)
    assert (trace, chosen, True) in events.feedback

    places = call(server, "gis_query", {"query": "benefits hub", "n_results": 2})
    context = call(server, "context", {"message": "heating bill help in Fayette County"})
    answer = call(server, "chat", {"message": "food pantry near Beckley WV"})
    for result, ids, kind in (
        (places, [p["entity_id"] for p in places["results"]], "gis"),
        (context, [p["chunk_id"] for p in context["unstructured"]], "context"),
        (answer, [p["chunk_id"] for p in answer["evidence"]["unstructured"]], "context"),
    ):
        written = trace_events(state, result["trace_id"])
        assert ids and sorted(e["chunk_id"] for e in written) == sorted(ids), kind
        assert {e["context"]["kind"] for e in written} == {kind}
    assert call(server, "feedback", {"trace_id": answer["trace_id"], "useful": False})["recorded"] == 1


def test_answer_cache_stats_warm_up_and_invalidation(server, operator) -> None:
    question = "Medicaid renewal documents in Raleigh County"
    warmed = call(operator, "answer_cache_warm_up", {"questions": [question]})
    assert warmed["answered"] == [question] and warmed["entries"] >= 2
    before = call(server, "answer_cache_stats", {})
    assert call(server, "chat", {"message": question})["cached"] is True  # the public role gets the warm answer
    after = call(server, "answer_cache_stats", {})
    assert after["hits"].get("chat", 0) == before["hits"].get("chat", 0) + 1 and after["entries"] >= 2
    assert "may not" in error_of(server, "answer_cache_warm_up", {})
    assert call(operator, "answer_cache_invalidate", {})["dropped"] >= 2
    assert call(server, "answer_cache_stats", {})["entries"] == 0
    assert call(server, "chat", {"message": question})["cached"] is False


def test_invalidation_empties_the_persistent_tier_other_processes_read(state, embedder, tmp_path) -> None:
    from serving.mcp import build_server
    from serving.services.context import ContextService
    from serving.state import ServingState

    def process(role: str):
        """A server with a process state of its own, sharing the persistent answer cache file."""
        own = ServingState.from_settings(state.settings, embedder)
        settings = ContextSettings(warm_up=False, cache_path=tmp_path / "answers.sqlite")
        own.context_service = ContextService(own, settings)
        return build_server(own, role=role, operator_roles=("internal",))

    question = {"message": "Food pantry near Beckley WV"}
    operator = process("internal")
    call(operator, "answer_cache_warm_up", {"questions": [question["message"]]})
    assert call(operator, "answer_cache_stats", {})["persistent"] is True
    assert call(process("public"), "chat", question)["cached"] is True  # another process finds the warm answer
    assert call(operator, "answer_cache_invalidate", {})["dropped"] == 2  # chat and context of the question
    assert call(process("public"), "chat", question)["cached"] is False


def test_reindex_only_for_operator_roles_and_it_starts_a_recorded_run(
    server, state, embedder, tmp_path, monkeypatch
) -> None:
    from serving.mcp import build_server
    from serving.settings import Settings
    from serving.state import ServingState

    refused = error_of(server, "reindex", {})
    assert "may not start a reindex" in refused and "public" in refused

    # An operator on a home of its own (nothing published yet): the run is launched and recorded on the instance.
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    monkeypatch.setenv("RAG_SOURCES", str(PROJECT / "examples" / "sources.yaml"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    roles = {"public": ["public"], "community": ["public"], "admin": ["public", "internal"]}
    fresh = ServingState.from_settings(Settings(index_dir=tmp_path / "rag_index", roles=roles), embedder)
    assert "may not" in error_of(build_server(fresh, role="community", operator_roles=("admin",)), "reindex", {})
    admin = build_server(fresh, role="admin", operator_roles=("admin",))
    started = call(admin, "reindex", {"job": "build_index"})
    assert started["job"] == "build_index" and started["dagster_home"] == str(tmp_path / "dagster")
    try:
        deadline = time.monotonic() + 120
        status = call(admin, "reindex_status", {"run_id": started["run_id"]})
        while status["status"] == "LAUNCHING":
            assert time.monotonic() < deadline, (tmp_path / "dagster" / "logs").iterdir()
            time.sleep(1)
            status = call(admin, "reindex_status", {"run_id": started["run_id"]})
        # The run is on the instance under the id the tool returned.
        assert status["job"] == "build_index" and status["status"] in {"NOT_STARTED", "STARTING", "STARTED"}
    finally:
        # No need to wait for the build: stop it.
        os.killpg(started["pid"], signal.SIGTERM)
        deadline = time.monotonic() + 60
        while call(admin, "reindex_status", {"run_id": started["run_id"]})["launcher_running"]:
            assert time.monotonic() < deadline
            time.sleep(0.5)


def _tool_names_over(transport: str, home, tmp_path) -> tuple[set[str], dict]:
    """Start ``python -m livemem.mcp_server`` as its own process and talk to it with the package's client."""
    import socket
    import subprocess
    import sys

    from mcp import ClientSession

    env = {**os.environ, "RAG_INDEX_DIR": str(home.root), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(PROJECT)}

    async def session_calls(read, write) -> tuple[set[str], dict]:
        async with ClientSession(read, write) as session:
            started = await session.initialize()
            names = {t.name for t in (await session.list_tools()).tools}
            result = await session.call_tool("query", {"query": "heating bill help", "top_k": 2})
            manifest = await session.read_resource("livemem://index/manifest")
            prompts = (await session.list_prompts()).prompts
            extra = {
                "server": (started.server_info.name, started.server_info.version),
                "resources": {str(r.uri) for r in (await session.list_resources()).resources},
                "manifest": json.loads(manifest.contents[0].text),
                "prompts": {p.name for p in prompts},
            }
            return names, {**result.structured_content, "session": extra}

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
    from importlib.metadata import version

    names, data = _tool_names_over(transport, home, tmp_path)
    assert names == TOOLS
    session = data["session"]
    assert session["server"] == ("living-memory", version("living-memory"))
    assert "livemem://index/manifest" in session["resources"] and session["manifest"]["version_id"] == home.current()
    assert session["prompts"] == {"answer_about_my_place", "cite_sources"}
    assert len(data["results"]) == 2 and all(r["collection"] != "internal_playbooks" for r in data["results"])


def test_tools_without_chunks_write_one_usage_event_each_that_the_rollup_ignores(server, state) -> None:
    """Registry, stats and cache tools answer with no chunk: each call is one usage event (chunk_id null,
    context.kind naming the tool), read by the nightly rollup without error and counted as no chunk use."""
    from livemem.usage.attention import read_day

    call(server, "resources", {"county": "Fayette", "limit": 2})
    call(server, "index_stats", {})
    call(server, "answer_cache_stats", {})
    day = datetime.now(UTC).date()
    state.traces.flush()  # queued by the tools: on disk now
    kinds = []
    for path in Path(state.settings.traces_path).glob("*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            event = json.loads(line)
            if event.get("event") == "retrieval" and event["context"].get("kind") in (
                "resources", "index_stats", "answer_cache_stats",
            ):  # fmt: skip
                assert event["chunk_id"] is None and event["agent"] == "mcp"
                kinds.append(event["context"]["kind"])
    assert {"resources", "index_stats", "answer_cache_stats"} <= set(kinds)
    events = read_day(state.settings.traces_path, day, UTC)
    assert events.malformed == 0


# --- serverInfo, resources, prompts, argument errors (issue 34) ----------------------------------------------------
def _internal_chunk(state) -> str:
    snap = state.reader.snapshot()
    return next(c for c, row in snap.row_of.items() if snap.columns["access"][row] == "internal")


def read_json(server, uri: str) -> Any:
    """A resource read through the client: one JSON text content."""

    async def steps(client):
        return (await client.read_resource(uri)).contents

    contents = in_session(server, steps)
    assert len(contents) == 1 and contents[0].mime_type == "application/json", contents
    return json.loads(contents[0].text)


def refused(server, steps: Callable[[Any], Any]) -> Any:
    """The protocol error (``MCPError``) that ``steps(client)`` must raise."""
    from mcp import MCPError

    async def run(client):
        with pytest.raises(MCPError) as raised:
            await steps(client)
        return raised.value.error

    return in_session(server, run)


def test_server_info_names_the_package_and_its_version(server) -> None:
    from importlib.metadata import version

    async def steps(client):
        return client.server_info

    info = in_session(server, steps)
    assert info.name == "living-memory" and info.version == version("living-memory") and info.version


def test_resources_offer_the_manifest_chunks_and_stats(server, operator, state, embedder, tmp_path_factory) -> None:
    from fastapi.testclient import TestClient
    from support.context import make_app

    async def listed(client):
        return await client.list_resources(), await client.list_resource_templates()

    resources, templates = in_session(server, listed)
    assert {str(r.uri) for r in resources.resources} == {
        "livemem://index/manifest", "livemem://index/stats", "livemem://answer-cache/stats",
    }  # fmt: skip
    assert all(r.description and r.mime_type == "application/json" for r in resources.resources)
    assert [t.uri_template for t in templates.resource_templates] == ["livemem://chunks/{chunk_id}"]

    snap = state.reader.snapshot()
    manifest = read_json(server, "livemem://index/manifest")
    assert manifest["version_id"] == snap.version_id and manifest["published_at"].startswith("20")
    assert manifest["model"] == snap.model_id
    assert set(manifest["collections"]) == set(snap.collections_for(frozenset({"public"})))
    assert manifest["counts"]["chunks"] == sum(manifest["collections"].values())
    assert manifest["counts"]["registry_rows"] > 0
    sources = snap.manifest["sources"]
    assert manifest["sources"] and all(s["commit"] == sources[n]["head_commit"] for n, s in manifest["sources"].items())
    assert all(s["access"] == "public" for s in manifest["sources"].values())  # the internal source is not named
    internal = read_json(operator, "livemem://index/manifest")
    assert "internal_playbooks" in internal["collections"] and set(internal["sources"]) == set(sources)

    chunk_id = call(server, "query", {"query": "heating bill help", "top_k": 1})["results"][0]["chunk_id"]
    chunk = read_json(server, f"livemem://chunks/{chunk_id}")
    with TestClient(make_app(example_index(tmp_path_factory), embedder)) as http:
        assert chunk == http.get(f"/chunks/{chunk_id}").json()  # the body GET /chunks/{id} answers
    assert chunk["content"] and chunk["provenance"]["commit"] and chunk["provenance"]["path"]

    # A chunk the role may not read is "not found", exactly as an id that does not exist.
    hidden, unknown = _internal_chunk(state), "00000000-0000-4000-8000-000000000000"
    assert read_json(operator, f"livemem://chunks/{hidden}")["collection"] == "internal_playbooks"
    errors = {
        c: refused(server, lambda client, c=c: client.read_resource(f"livemem://chunks/{c}")) for c in (hidden, unknown)
    }
    assert errors[hidden].code == errors[unknown].code
    assert errors[hidden].message == errors[unknown].message.replace(unknown, hidden)
    assert errors[hidden].message.startswith(f"no chunk {hidden}")

    assert read_json(server, "livemem://index/stats") == call(server, "index_stats", {})
    cache = read_json(server, "livemem://answer-cache/stats")
    assert set(cache) == set(call(server, "answer_cache_stats", {})) and cache["max_entries"] > 0


def test_prompts_are_listed_fetched_and_their_arguments_checked(server, state) -> None:
    from mcp.types import PromptReference

    async def listed(client):
        return {p.name: p for p in (await client.list_prompts()).prompts}

    prompts = in_session(server, listed)
    assert set(prompts) == {"answer_about_my_place", "cite_sources"}
    for prompt in prompts.values():
        assert prompt.description and all(a.description for a in prompt.arguments)
        assert not re.search(r"\n\s", prompt.description), prompt.name
    required = {p: {a.name for a in prompts[p].arguments if a.required} for p in prompts}
    assert required == {"answer_about_my_place": {"question"}, "cite_sources": {"question"}}
    assert {a.name for a in prompts["answer_about_my_place"].arguments} == {"question", "county", "zip", "place"}

    def get(name: str, arguments: dict[str, str]) -> str:
        async def steps(client):
            return await client.get_prompt(name, arguments)

        result = in_session(server, steps)
        assert [m.role for m in result.messages] == ["user"]
        return result.messages[0].content.text

    place = get(
        "answer_about_my_place", {"question": "Where can I get help with my heating bill?", "place": "Oak Hill"}
    )
    assert "Fayette County Benefits Guide" in place and "[1]" in place and "Cite every statement" in place
    trace_id = re.search(r"send trace_id (\S+) to the `feedback` tool", place).group(1)
    assert call(server, "feedback", {"trace_id": trace_id, "useful": True})["recorded"] == 1
    by_county = get("answer_about_my_place", {"question": "heating bill help", "county": "Raleigh"})
    assert "raleigh-county.md" in by_county and "fayette-county.md" not in by_county

    cited = get("cite_sources", {"question": "heating bill help", "top_k": "2", "collection": "wv_benefits"})
    uris = re.findall(r"^\[(\d)\] wv_benefits · \S+ · commit [0-9a-f]{12} \(\d{4}-\d\d-\d\d\) · (livemem://chunks/\S+)$",
                      cited, re.M)  # fmt: skip
    assert [n for n, _ in uris] == ["1", "2"] and "Sources" in cited
    assert read_json(server, uris[0][1])["content"].strip() in cited  # each source is the chunk resource's text

    def error(name: str, arguments: dict[str, str]) -> str:
        return refused(server, lambda client: client.get_prompt(name, arguments)).message

    too_many = error("cite_sources", {"question": "heating", "top_k": "99"})
    assert too_many.startswith("invalid arguments for prompt cite_sources: top_k:") and "20" in too_many
    assert "county: must be 'Barbour'" in error("answer_about_my_place", {"question": "x", "county": "Nowhere"})
    assert "zip: must match pattern" in error("answer_about_my_place", {"question": "x", "zip": "123"})
    assert "question: is required" in error("cite_sources", {})
    assert "internal_playbooks" in error("cite_sources", {"question": "x", "collection": "internal_playbooks"})
    assert "colour: is not an argument" in error("cite_sources", {"question": "x", "colour": "red"})
    assert "cite_sources" in error("nope", {})

    async def complete(client):
        reference = PromptReference(type="ref/prompt", name="answer_about_my_place")
        return (await client.complete(reference, {"name": "county", "value": "ra"})).completion.values

    assert in_session(server, complete) == ["Raleigh", "Randolph"]


def test_argument_errors_name_the_argument_without_pydantic_links(server) -> None:
    bad = error_of(server, "query", {"query": "heating", "top_k": 500, "collections": ["nope"]})
    assert bad.startswith("invalid arguments for tool query: ")
    assert "top_k: must be less than or equal to 50 (got 500)" in bad
    assert "collections[0]: must be 'code', 'governance' or 'wv_benefits' (got \"nope\")" in bad
    assert "query: is required" in error_of(server, "query", {})
    typo = error_of(server, "query", {"query": "heating", "topk": 3})  # ignored before issue 49, as prompts never did
    assert typo.startswith("invalid arguments for tool query: topk: is not an argument of this tool (query, top_k")
    mixed = error_of(server, "feedback", {"trace_id": "x", "useful": "maybe"})
    assert "trace_id: must match pattern" in mixed and "useful: must be a valid boolean" in mixed
    long = error_of(server, "context", {"message": "x" * 5000})
    assert "message: must have at most 4000 characters" in long and len(long) < 300  # the input is not echoed whole
    for text in (bad, mixed, long):
        assert not re.search(r"pydantic|Arguments|input_type|input_value|\[type=", text), text


def test_before_anything_is_published_resources_and_prompts_say_so(embedder, tmp_path) -> None:
    from serving.mcp import build_server
    from serving.settings import Settings
    from serving.state import ServingState

    empty = build_server(ServingState.from_settings(Settings(index_dir=tmp_path / "rag_index"), embedder))
    manifest = refused(empty, lambda client: client.read_resource("livemem://index/manifest"))
    chunk = refused(empty, lambda client: client.read_resource("livemem://chunks/00000000-0000-4000-8000-000000000000"))
    prompt = refused(empty, lambda client: client.get_prompt("cite_sources", {"question": "heating"}))
    assert manifest.message == chunk.message == prompt.message and "published" in manifest.message, manifest
    assert "Internal" not in manifest.message and "Error" not in manifest.message


def test_sparql_names_entities_under_the_configured_base_iri(state, embedder) -> None:
    """As /facts/sparql does (RAG_RDF_BASE_IRI): the MCP sparql tool's IRIs are the ones this deployment serves."""
    from serving.mcp import build_server
    from serving.settings import Settings
    from serving.state import ServingState

    linked = ServingState.from_settings(
        Settings(index_dir=state.settings.index_dir, rdf_base_iri="http://memory.example/", warm_up=False), embedder
    )
    rows = call(build_server(linked), "sparql", {"query": "SELECT ?e WHERE { ?e rdfs:label ?l }", "limit": 3})["rows"]
    assert rows and all(r["e"].startswith("http://memory.example/gbim/entity/") for r in rows), rows
