"""GBIM entities by meaning within spatial constraints (``POST /gis/query``, the MCP ``gis_query`` tool) and one
entity with its relations (``GET /entities/{id}``, the MCP ``facts`` tool, ``serving.services.facts``): access,
the mask, the one ranking (``livemem.answer.gis_rank``), the usage traces."""

from __future__ import annotations

import difflib
from functools import cache
from typing import TYPE_CHECKING, Any, cast

from livemem.answer.gis_rank import rank_entities, ranked_hits
from livemem.engine.snapshot import Snapshot
from livemem.geo.names import tidy_county_key
from livemem.geo.zips import zip_data
from livemem.query.gis_index import GisIndex, cached_gis_index
from livemem.usage.traces import retrieval_events
from serving.models.gis import GisQueryRequest
from serving.services.errors import ServiceError

if TYPE_CHECKING:
    from serving.state import Role, ServingState

EXPORT_HINT = "run the Dagster job `export_gbim` (dagster job execute -m orchestration.definitions -j export_gbim)"


def gis_index(snap: Snapshot) -> GisIndex:
    """The GIS part of the version ``snap`` serves; a 503 naming the job to run when it holds none."""
    index = cached_gis_index(str(snap.path), snap.engine)
    if index is None:
        raise ServiceError(503, f"index version {snap.version_id} holds no GBIM entities: {EXPORT_HINT}")
    return index


def _as_tuple(value: str | list[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


@cache
def _us_county_keys() -> frozenset[str]:
    """Every US county's comparison key (the ZIP data's counties of every state)."""
    keys = {tidy_county_key(county) for _, county, _ in zip_data().values() if county}
    return frozenset(key for key in keys if key is not None)


def check_counties(index: GisIndex, counties: tuple[str, ...]) -> None:
    """A 422 for a county that is no US county and no county of the entities, with the closest names of the
    entities' counties (as /resources says "did you mean"); a real county with no entity answers with no hits."""
    keyed = {tidy_county_key(c): c for c in index.table.dictionary("county") if c is not None}
    known = {key: c for key, c in keyed.items() if key is not None}
    for county in counties:
        key = tidy_county_key(county)
        if key is None or key in known or key in _us_county_keys():
            continue
        close = difflib.get_close_matches(key, list(known), n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(known[c] for c in close)}?)" if close else ""
        raise ServiceError(422, f"county {county!r} is not a county{hint}")


class GisService:
    def __init__(self, state: ServingState) -> None:
        self.state = state

    def query(self, body: GisQueryRequest, role: Role, agent: str | None = None) -> dict[str, Any]:
        """The ``GisQueryResponse`` body (``results``, ``index_version``, ``trace_id``, ``candidates``): the
        ``n_results`` entities most like the query among those meeting the constraints that ``role`` may read."""
        state = self.state
        snap = state.reader.snapshot()
        index = gis_index(snap)
        near = (body.near.lat, body.near.lon, body.near.radius_km) if body.near else None
        check_counties(index, _as_tuple(body.county))
        mask = index.mask(
            role.access,
            # the model's validator lets only 4 numbers through
            bbox=cast("tuple[float, float, float, float]", tuple(body.bbox)) if body.bbox else None,
            near=near,
            counties=_as_tuple(body.county),
            datasets=_as_tuple(body.dataset),
        )
        ranked = rank_entities(index, state.retriever.encode(body.query), body.n_results, mask)
        hits = ranked_hits(index, ranked, near)
        if body.min_score is not None:
            hits = [h for h in hits if h["score"] >= body.min_score]
        notes = (
            ["recency_bias: GBIM entities carry no date, so the ranking is by meaning only"]
            if body.recency_bias
            else []
        )
        ids = [h["entity_id"] for h in hits]
        trace_id = state.signer.issue(role=role.name, index_version=snap.version_id, chunk_ids=ids)
        events = retrieval_events(
            trace_id=trace_id,
            query=body.query,
            chunk_ids=ids,
            scores=[h["score"] for h in hits],
            role=role.name,
            breath_phase=snap.breath_phase,
            index_version=snap.version_id,
            mode="dense",
            return_="chunks",
            filters=body.model_dump(exclude_none=True, include={"bbox", "near", "county", "dataset"}),
            collections=sorted({index.entities[int(row)]["collection"] for row in ranked.rows}),
            cache_hit=False,
        )
        for event in events:
            event["context"]["kind"] = "gis"  # ids are GBIM entity ids, not chunk ids
            if agent is not None:
                event["agent"] = agent
        state.traces.submit(events)  # queued: the answer does not wait for the trace file
        return {
            "results": hits,
            "index_version": snap.version_id,
            "trace_id": trace_id,
            "candidates": ranked.candidates,
            "notes": notes,
        }

    def entity(self, snap: Snapshot, entity_id: str, role: Role) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The entity and its relations; one the role may not read is a 404 exactly like one that does not exist."""
        index = gis_index(snap)
        row = index.row_of.get(entity_id)
        if row is None or index.access[row] not in role.access:
            raise ServiceError(404, f"no GBIM entity {entity_id} in index version {snap.version_id}")
        return index.entities[row], index.relations.get(entity_id, [])
