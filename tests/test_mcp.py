"""The MCP server's tools through the mcp package's own client (in-process session)."""

from __future__ import annotations

import json

import anyio
import pytest
from context_support import example_index

from livemem.context import ContextSettings


@pytest.fixture(scope="module")
def server(tmp_path_factory, embedder):
    from livemem.mcp_server import build_server
    from serving.context_service import ContextService
    from serving.settings import Settings
    from serving.state import ServingState

    home = example_index(tmp_path_factory)
    state = ServingState.from_settings(Settings(index_dir=home.root, warm_up=False), embedder)
    state.context_service = ContextService(state, ContextSettings(warm_up=False))
    return build_server(state)


def call(server, name: str, arguments: dict) -> dict:
    from mcp import Client

    async def run():
        async with Client(server) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert tools == {"query", "gis_query", "resources", "context", "index_stats"}
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
