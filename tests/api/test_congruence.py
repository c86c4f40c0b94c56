"""Congruence of the front doors (as qdrant-client's test_*_congruence): the same requests through HTTP (TestClient),
MCP (the package's in-process client) and the CLI (``livemem query --json`` through typer's CliRunner) give the same
ids, scores (``score`` and ``score_normalized``) and fields, because one service answers each of them
(``serving.services``).

Every door has its own serving state over the bundled example (so no door is answered from another's result
cache), and the deployment ranks hybrid queries with a fusion other than the default (``RAG_FUSION=rrf``): a door
that ranked with default settings would show it."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from support.context import INTERNAL_KEY, example_index
from typer.testing import CliRunner

FUSION = "rrf"  # not the default (linear): every door must rank with the deployment's settings
# (role, the request as the HTTP body has it); each door is sent the same through its own arguments
QUERIES = [
    ("public", {"query": "help paying the heating bill", "top_k": 5}),
    ("public", {"query": "SNAP office", "top_k": 4, "mode": "dense", "filters": {"county": "Fayette"}}),
    ("public", {"query": "heating bill help", "top_k": 3, "mode": "sparse", "collections": ["wv_benefits"]}),
    ("internal", {"query": "caseworker escalation checklist", "top_k": 5}),
    ("internal", {"query": "heating bill help", "top_k": 3, "return": "documents", "collections": ["wv_benefits"]}),
]
# what a result of each door must agree on: everything a QueryResult has
RESULT_FIELDS = (
    "chunk_id", "source", "content", "seal_state", "last_breath_seen", "attention_score", "provenance", "metadata",
    "collection", "parent_id", "matched_chunk_ids",
)  # fmt: skip
SCORES = ("score", "score_normalized")


@pytest.fixture(scope="module")
def doors(tmp_path_factory, embedder):
    """An HTTP client, an MCP server per role and the CLI's arguments, each over a serving state of its own."""
    from fastapi.testclient import TestClient

    from serving.app import create_app
    from serving.mcp import build_server
    from serving.settings import Settings
    from serving.state import ServingState

    home = example_index(tmp_path_factory)
    settings = Settings(
        index_dir=home.root, warm_up=False, api_keys={INTERNAL_KEY: "internal"}, fusion_method=FUSION, cache_size=64
    )
    mcp_state = ServingState.from_settings(settings, embedder)
    servers = {role: build_server(mcp_state, role=role, operator_roles=()) for role in ("public", "internal")}
    with TestClient(create_app(settings, embedder)) as client:
        yield {"http": client, "mcp": servers, "cli": ["--index-dir", str(home.root)]}


def http(doors, role: str, method: str, path: str, **kwargs) -> Any:
    headers = {**({"X-API-Key": INTERNAL_KEY} if role == "internal" else {}), **kwargs.pop("headers", {})}
    return doors["http"].request(method, path, headers=headers, **kwargs)


def mcp(doors, role: str, tool: str, arguments: dict) -> tuple[bool, Any]:
    """(is_error, the structured result or the error's text) of one tool call."""
    from mcp import Client

    async def run():
        async with Client(doors["mcp"][role]) as client:
            return await client.call_tool(tool, arguments)

    result = anyio.run(run)
    return result.is_error, (result.content[0].text if result.is_error else result.structured_content)


def mcp_query(doors, role: str, body: dict) -> dict:
    arguments = {k: body[k] for k in ("query", "top_k", "mode", "collections") if k in body}
    if "county" in body.get("filters", {}):
        arguments["county"] = body["filters"]["county"]
    if body.get("return") == "documents":
        arguments["documents"] = True
    failed, answer = mcp(doors, role, "query", arguments)
    assert not failed, answer
    return answer


def cli_query(doors, role: str, body: dict, monkeypatch, embedder) -> dict:
    import orchestration.cli as cli

    # the CLI loads the serving app's encoder itself; here the one the other doors share (the same model)
    monkeypatch.setattr(cli, "query_embedder", lambda _settings: embedder, raising=False)
    monkeypatch.setenv("RAG_FUSION", FUSION)
    monkeypatch.setenv("RAG_API_KEYS", json.dumps({INTERNAL_KEY: "internal"}))
    args = [*doors["cli"], "query", body["query"], "--top-k", str(body["top_k"]), "--role", role, "--json"]
    args += ["--mode", body.get("mode", "hybrid")]
    args += [part for c in body.get("collections", ()) for part in ("--collection", c)]
    if "county" in body.get("filters", {}):
        args += ["--county", body["filters"]["county"]]
    if body.get("return") == "documents":
        args.append("--documents")
    done = CliRunner().invoke(cli.app, args)
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def same_results(name: str, got: list[dict], expected: list[dict]) -> None:
    assert [r["chunk_id"] for r in got] == [r["chunk_id"] for r in expected], f"{name}: other ids"
    for mine, theirs in zip(got, expected, strict=True):
        for key in SCORES:
            assert theirs[key] is not None, f"HTTP gave no {key}"
            assert mine[key] == pytest.approx(theirs[key], rel=1e-6, abs=1e-9), f"{name}: {key} of {mine['chunk_id']}"
        parts = {k: None if v is None else pytest.approx(v, rel=1e-6, abs=1e-9) for k, v in theirs["scores"].items()}
        assert mine["scores"] == parts, f"{name}: score parts"
        assert {k: mine.get(k) for k in RESULT_FIELDS} == {k: theirs.get(k) for k in RESULT_FIELDS}, name


def same_answer(name: str, got: dict, expected: dict) -> None:
    same_results(name, got["results"], expected["results"])
    for key in ("index_version", "mode", "return", "candidates"):
        assert got.get(key) == expected[key], f"{name}: {key}"
    assert [s["chunk_id"] for s in got.get("consider_also", [])] == [s["chunk_id"] for s in expected["consider_also"]]
    by_source = {c: [r["chunk_id"] for r in rs] for c, rs in expected["results_by_source"].items()}
    assert {c: [r["chunk_id"] for r in rs] for c, rs in got.get("results_by_source", {}).items()} == by_source, name


@pytest.mark.parametrize(("role", "body"), QUERIES, ids=[f"{r}-{b['query'][:20]}" for r, b in QUERIES])
def test_a_query_gets_the_same_answer_through_http_mcp_and_the_cli(doors, role, body, monkeypatch, embedder) -> None:
    answered = http(doors, role, "POST", "/query", json=body)
    assert answered.status_code == 200, answered.text
    expected = answered.json()
    assert expected["results"], "the example answers each of these"
    same_answer("mcp", mcp_query(doors, role, body), expected)
    same_answer("cli", cli_query(doors, role, body, monkeypatch, embedder), expected)


def test_a_gis_query_gets_the_same_places_through_http_and_mcp(doors) -> None:
    body = {"query": "benefits hub", "n_results": 3, "county": "Fayette"}
    answered = http(doors, "public", "POST", "/gis/query", json=body, headers={"Accept": "application/json"})
    assert answered.status_code == 200, answered.text
    expected = answered.json()
    failed, got = mcp(doors, "public", "gis_query", body)
    assert not failed, got
    assert [h["entity_id"] for h in got["results"]] == [h["entity_id"] for h in expected["results"]]
    for mine, theirs in zip(got["results"], expected["results"], strict=True):
        assert mine["score"] == pytest.approx(theirs["score"], rel=1e-6, abs=1e-9)
        assert {k: v for k, v in mine.items() if k != "score"} == {k: v for k, v in theirs.items() if k != "score"}
    assert (got["candidates"], got["index_version"]) == (expected["candidates"], expected["index_version"])


def test_a_chunk_by_id_is_the_same_through_http_and_mcp_and_hidden_alike(doors) -> None:
    internal = http(
        doors, "internal", "POST", "/query", json={"query": "caseworker", "collections": ["internal_playbooks"]}
    )
    hidden = internal.json()["results"][0]["chunk_id"]
    shown = http(doors, "public", "POST", "/query", json={"query": "heating bill help", "top_k": 1}).json()
    chunk_id = shown["results"][0]["chunk_id"]

    expected = http(doors, "public", "GET", f"/chunks/{chunk_id}", params={"verify": "true"})
    assert expected.status_code == 200, expected.text
    failed, got = mcp(doors, "public", "verify_chunk", {"chunk_id": chunk_id})
    assert not failed and got == expected.json()

    refused = http(doors, "public", "GET", f"/chunks/{hidden}")
    failed, message = mcp(doors, "public", "verify_chunk", {"chunk_id": hidden})
    assert refused.status_code == 404 and failed and message.endswith(f"verify_chunk: {refused.json()['detail']}")


def test_feedback_is_recorded_and_refused_alike_through_http_and_mcp(doors) -> None:
    body = {"query": "help paying the heating bill", "top_k": 3}
    by_http = http(doors, "public", "POST", "/query", json=body).json()
    by_mcp = mcp_query(doors, "public", body)
    other = http(doors, "public", "POST", "/query", json={"query": "WIC infants", "top_k": 10}).json()["results"]
    foreign = next(r["chunk_id"] for r in other if r["chunk_id"] not in {h["chunk_id"] for h in by_http["results"]})

    def verdict(trace_id: str, chunk_id: str) -> dict:
        return {"trace_id": trace_id, "useful": True, "chunk_ids": [chunk_id]}

    done = http(
        doors, "public", "POST", "/feedback", json=verdict(by_http["trace_id"], by_http["results"][0]["chunk_id"])
    )
    assert done.status_code == 200 and done.json() == {"trace_id": by_http["trace_id"], "recorded": 1}
    failed, recorded = mcp(doors, "public", "feedback", verdict(by_mcp["trace_id"], by_mcp["results"][0]["chunk_id"]))
    assert not failed and recorded == {"trace_id": by_mcp["trace_id"], "recorded": 1}

    refused = http(doors, "public", "POST", "/feedback", json=verdict(by_http["trace_id"], foreign)).json()["detail"]
    failed, message = mcp(doors, "public", "feedback", verdict(by_mcp["trace_id"], foreign))
    assert failed and message.endswith(f"feedback: {refused['message']}: {refused['chunk_ids']}")


def test_the_front_doors_share_typed_services_and_no_router_reaches_into_another() -> None:
    """The services are fields of the serving state, and a router takes what it shares with others from
    ``serving.deps`` or ``serving.services``, never from another router (the seed routes and ``/chat`` share
    ``serving.services.answers``)."""
    import ast
    import dataclasses
    from pathlib import Path

    import serving.routers
    from serving.state import ServingState

    fields = {f.name: f.type for f in dataclasses.fields(ServingState)}
    for name in ("query", "gis", "facts", "chunks", "feedback", "context_service"):
        assert name in fields, name
    reached = set()
    for path in Path(serving.routers.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("serving.routers."):
                reached.add((path.stem, node.module.rsplit(".", 1)[1]))
    assert reached == set()


def test_before_anything_is_published_every_door_says_so_alike(tmp_path, embedder, monkeypatch) -> None:
    from fastapi.testclient import TestClient

    import orchestration.cli as cli
    from serving.app import create_app
    from serving.mcp import build_server
    from serving.settings import Settings
    from serving.state import ServingState

    settings = Settings(index_dir=tmp_path / "rag_index", warm_up=False)
    with TestClient(create_app(settings, embedder)) as client:
        refused = client.post("/query", json={"query": "heating"})
    assert refused.status_code == 503 and str(tmp_path) not in refused.text
    doors = {"mcp": {"public": build_server(ServingState.from_settings(settings, embedder))}}
    failed, message = mcp(doors, "public", "query", {"query": "heating"})
    assert failed and message.endswith(f"query: {refused.json()['detail']}")
    monkeypatch.setattr(cli, "query_embedder", lambda _settings: embedder, raising=False)
    done = CliRunner().invoke(cli.app, ["--index-dir", str(tmp_path / "rag_index"), "query", "heating", "--json"])
    assert done.exit_code == 1 and "no index published" in done.output
