"""The answer shapes the front doors (HTTP routes and MCP tools) return, built from core results in one place."""

from __future__ import annotations

from typing import Any

from livemem.answer.prompt import SECTIONS


def gis_hit(entity: dict[str, Any], score: float, distance_km: float | None) -> dict[str, Any]:
    """A GBIM entity as a spatial search result: its description, dataset, coordinates (source CRS and
    EPSG:4326), its score and, for a radius search, its distance."""
    return {
        "entity_id": entity["entity_id"],
        "description": entity["description"],
        "dataset": entity["dataset"],
        "label": entity["label"],
        "metadata": {k: entity[k] for k in ("worldview_id", "county", "gbim_entity")},
        **{k: entity[k] for k in ("centroid_x", "centroid_y", "srid", "lon", "lat")},
        "score": score,
        "distance_km": distance_km,
    }


def chat_body(result: dict[str, Any]) -> dict[str, Any]:
    """A chat result as answered: the answer with its citations, the route, the evidence by section, and what
    identifies it (version, trace, thread, whether it came from the answer cache)."""
    answer = result["answer"]
    return {
        **answer,
        "route": result["route"],
        "evidence": {s: result[s] for s in SECTIONS},
        "index_version": result["index_version"],
        "trace_id": result["trace_id"],
        "thread_id": result.get("thread_id"),
        "cached": result["cached"],
    }
