"""The answer shapes the front doors (HTTP routes and MCP tools) return, built from core results in one place."""

from __future__ import annotations

from typing import Any

from livemem.answer.prompt import SECTIONS
from livemem.engine.snapshot import Snapshot
from livemem.query.types import DocumentHit, Hit, Suggestion


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


# RFC 7946 §11.2: six decimal places of a degree are about 0.1 m, finer than any centroid here is known; more are
# noise that only makes the GeoJSON larger. Only the GeoJSON forms are rounded (JSON answers keep lon/lat as stored).
GEOJSON_DECIMALS = 6
HIT_FEATURE_KEYS = ("entity_id", "lon", "lat")  # the Feature's id and geometry, not repeated in its properties


def geojson_point(lon: float | None, lat: float | None) -> dict[str, Any] | None:
    """A GeoJSON Point at ``[lon, lat]`` (EPSG:4326) rounded to ``GEOJSON_DECIMALS``; None without a position."""
    if lon is None or lat is None:
        return None
    return {"type": "Point", "coordinates": [round(lon, GEOJSON_DECIMALS), round(lat, GEOJSON_DECIMALS)]}


def gis_hit_feature(hit: dict[str, Any]) -> dict[str, Any]:
    """A ``gis_hit`` as a GeoJSON Feature: the entity id, its centroid as a Point, the rest of the hit as properties
    with ``metadata``'s fields (county, worldview_id, gbim_entity) also top-level, where GIS clients filter and
    style by them (``metadata`` is kept, as in the JSON answer)."""
    properties: dict[str, Any] = {}
    for key, value in hit.items():
        if key == "metadata":
            properties.update(value)
        if key not in HIT_FEATURE_KEYS:
            properties[key] = value
    return {
        "type": "Feature",
        "id": hit["entity_id"],
        "geometry": geojson_point(hit["lon"], hit["lat"]),
        "properties": properties,
    }


def entity_feature(entity: dict[str, Any], relations: list[dict[str, Any]], index_version: str) -> dict[str, Any]:
    """A GBIM entity with its relations as a GeoJSON Feature: the entity id, its centroid as a Point, the rest of
    the record as properties; ``index_version`` is a foreign member (RFC 7946 §6.1), as on the FeatureCollection."""
    properties = {k: v for k, v in entity.items() if k not in HIT_FEATURE_KEYS}
    return {
        "type": "Feature",
        "id": entity["entity_id"],
        "geometry": geojson_point(entity["lon"], entity["lat"]),
        "properties": {**properties, "relations": relations},
        "index_version": index_version,
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


# --- query results: a chunk, a parent document, a suggestion as the front doors return them ---------------------
def suggestion_result(snap: Snapshot, suggestion: Suggestion) -> dict[str, Any]:
    record = snap.record(suggestion.row)
    return {
        **record,
        "collection": record["metadata"]["collection"],
        "suggestion": True,
        "strength": suggestion.strength,
        "related_to": [snap.ids[r] for r in suggestion.related_to],
    }


def chunk_result(snap: Snapshot, hit: Hit) -> dict[str, Any]:
    """A chunk record with its score and collection, as one result of a query."""
    record = snap.record(hit.row)
    return {
        **record,
        "score": hit.score,
        "collection": record["metadata"]["collection"],
        "scores": {"dense": hit.dense, "sparse": hit.sparse, "sentence": hit.sentence},
    }


def document_results(snap: Snapshot, documents: list[DocumentHit]) -> list[dict[str, Any]]:
    """Each parent document once, with its whole text, ranked by its best chunk."""
    parents = snap.parents([d.parent_id for d in documents])
    out = []
    for doc in documents:
        best = chunk_result(snap, doc.hits[0])
        parent = parents.get(doc.parent_id)
        if parent is None:  # a version always has its parents; fall back to the chunk rather than fail
            out.append({**best, "parent_id": doc.parent_id, "matched_chunk_ids": [best["chunk_id"]]})
            continue
        metadata = {
            **best["metadata"],
            "type": parent["type"],
            "size": parent["size"],
            "created_at": parent["created_at"],
            "updated_at": parent["updated_at"],
            "chunk_count": parent["chunk_count"],
            "truncated": bool(parent["truncated"]),
        }
        for key in ("heading_path", "chunk_index", "content_hash"):
            metadata.pop(key, None)
        attention = max(float(snap.columns["attention"][h.row]) for h in doc.hits)
        out.append(
            {
                **best,
                "content": parent["content"],
                "seal_state": parent["seal_state"],
                "attention_score": attention,
                "provenance": {
                    "path": parent["path"],
                    "commit": parent["commit_sha"],
                    "timestamp": parent["timestamp"],
                },
                "metadata": metadata,
                "parent_id": doc.parent_id,
                "matched_chunk_ids": [snap.ids[h.row] for h in doc.hits],
            }
        )
    return out
