"""An MCP server (the ``mcp`` package's ``MCPServer``, formerly FastMCP) exposing the living memory as tools.

Tools: ``query``, ``gis_query``, ``resources``, ``context``, ``feedback``, ``index_stats``; each calls the same plain
functions as the HTTP API, against the version ``CURRENT`` names, as the role ``LIVEMEM_MCP_ROLE`` (default public).
``query`` and ``context`` write usage traces and return a signed ``trace_id`` that ``feedback`` accepts, exactly
like ``/query``, ``/context`` and ``/feedback``: MCP use feeds the nightly attention rollup too.

    python -m livemem.mcp_server                       # stdio (for desktop assistants)
    python -m livemem.mcp_server --http --port 8765    # streamable HTTP on 127.0.0.1:8765/mcp
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from mcp.server.mcpserver import MCPServer

from livemem.context import ContextRequest, gis_for
from livemem.registry import RegistryQueryError, load_registry_index, resolve
from livemem.retrieval import Filters, Query, chunk_result, top_order
from livemem.traces import feedback_events, retrieval_events


def build_server(state: Any = None, role: str | None = None) -> MCPServer:
    """The server over a serving state (default: one built from the environment, like ``make serve``)."""
    from serving.context_service import context_service
    from serving.settings import Settings
    from serving.state import ServingState

    state = state or ServingState.from_settings(Settings.from_env())
    caller_role = state.role(role or os.environ.get("LIVEMEM_MCP_ROLE") or state.settings.public_role)
    server = MCPServer("living-memory", instructions="Place-aware retrieval memory for West Virginia benefits.")

    @server.tool()
    def query(query: str, top_k: int = 5, county: str | None = None, collection: str | None = None) -> dict:
        """Hybrid text search over the chunks this role may read; returns chunks with provenance and scores."""
        snap = state.reader.snapshot()
        visible = snap.collections_for(caller_role.access)
        collections = [collection] if collection in visible else visible
        filters = Filters(county=(county,) if county else ())
        found = state.retriever.search(snap, Query(query, max(1, min(top_k, 50)), filters=filters), collections)
        results = [chunk_result(snap, h) for h in found.chunks]
        ids = [r["chunk_id"] for r in results]
        trace_id = state.signer.issue(role=caller_role.name, index_version=snap.version_id, chunk_ids=ids)
        events = retrieval_events(
            trace_id=trace_id, query=query, chunk_ids=ids, scores=[r["score"] for r in results],
            role=caller_role.name, breath_phase=snap.breath_phase, index_version=snap.version_id, mode="hybrid",
            return_="chunks", filters={"county": [county]} if county else {}, collections=collections,
            cache_hit=False,
        )  # fmt: skip
        for event in events:
            event["agent"] = "mcp"
        state.traces.write(events)
        return {"index_version": snap.version_id, "trace_id": trace_id, "results": results}

    @server.tool()
    def gis_query(query: str, n_results: int = 5, county: str | None = None) -> dict:
        """Semantic search over GBIM entities (places) with an optional county."""
        snap = state.reader.snapshot()
        gis = gis_for(snap)
        if gis is None:
            return {"index_version": snap.version_id, "results": [], "error": "no GBIM export in this version"}
        import numpy as np

        rows = np.flatnonzero(gis.mask(caller_role.access, counties=(county,) if county else ()))
        scores = gis.dense[rows] @ state.retriever.encode(query) if rows.size else np.zeros(0)
        order = top_order(scores, max(1, min(n_results, 50)))
        results = [
            {**{k: gis.entities[int(rows[i])][k] for k in ("entity_id", "label", "description", "county", "lon",
                                                          "lat")}, "score": float(scores[i])}
            for i in order
        ]  # fmt: skip
        return {"index_version": snap.version_id, "results": results}

    @server.tool()
    def resources(
        zip: str | None = None, county: str | None = None, resource_type: str | None = None, limit: int = 10
    ) -> dict:
        """Verified programs of the local_resources registry for a ZIP, county and type."""
        snap = state.reader.snapshot()
        try:
            found = resolve(snap, zip=zip, county=county, resource_type=resource_type, limit=max(1, min(limit, 100)))
        except RegistryQueryError as exc:
            return {"index_version": snap.version_id, "results": [], "error": str(exc)}
        return {"index_version": snap.version_id, "county": found.county, "total": found.total, "results": found.rows}

    @server.tool()
    def context(message: str, county: str | None = None, zip: str | None = None, top_k: int | None = None) -> dict:
        """Route a message and return its evidence by source (text, facts, places, registry) and the prompt."""
        snap = state.reader.snapshot()
        service = context_service(state)
        result = service.context(snap, service.caller(caller_role), ContextRequest(message, county, zip, {}, top_k))
        return {k: v for k, v in result.items() if k != "hidden_collections"}

    @server.tool()
    def feedback(trace_id: str, useful: bool, chunk_ids: list[str] | None = None) -> dict:
        """Say whether the answer behind a trace_id of query or context (or some of its chunks) was useful:
        confirmed usefulness is what raises a chunk in later rankings."""
        issued = state.signer.verify(trace_id, role=caller_role.name)
        if issued is None:
            return {"recorded": 0, "error": "unknown trace_id: send the trace_id of an answer this server gave you"}
        chosen = list(dict.fromkeys(chunk_ids or []))[:100]
        foreign = [c for c in chosen if not issued.returned(c)]
        if foreign:
            return {"recorded": 0, "error": "these chunk_ids were not returned by this trace", "chunk_ids": foreign}
        snap = state.reader.snapshot()
        events = feedback_events(
            trace_id=issued.trace_id, chunk_ids=chosen, useful=useful, role=caller_role.name,
            breath_phase=snap.breath_phase, index_version=issued.index_version,
        )  # fmt: skip
        for event in events:
            event["agent"] = "mcp"
        if not state.traces.write(events):
            return {"recorded": 0, "error": "feedback could not be recorded; try again later"}
        return {"trace_id": issued.trace_id, "recorded": len(events)}

    @server.tool()
    def index_stats() -> dict:
        """The served version: id, model, chunks per visible collection, GBIM entities, registry rows."""
        snap = state.reader.snapshot()
        visible = snap.collections_for(caller_role.access)
        counts = {c: int((snap.columns["collection"] == c).sum()) for c in visible}
        gis = gis_for(snap)
        registry = load_registry_index(snap.path)
        return {
            "index_version": snap.version_id,
            "model": snap.model_id,
            "collections": counts,
            "chunks": sum(counts.values()),
            "gbim_entities": 0 if gis is None else int(gis.mask(caller_role.access).sum()),
            "registry_rows": 0 if registry is None else len(registry.rows),
        }

    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", action="store_true", help="streamable HTTP instead of stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    server = build_server()
    if args.http:
        server.run("streamable-http", host=args.host, port=args.port)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
