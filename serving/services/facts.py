"""Relation triples of the GBIM entities a role may read (``GET /facts``, the MCP ``facts`` tool)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from livemem.engine.snapshot import Snapshot
from livemem.gbim import find_entities
from livemem.geo.names import lower_without_county
from livemem.query.gis_index import GisIndex
from serving.services.gis import gis_index

if TYPE_CHECKING:
    from serving.state import Role, ServingState


@dataclass(frozen=True)
class Facts:
    """The triples found (each with its subject's and, for an entity object, its object's label), the entities a
    ``name`` matched (None: no name given), and the GIS part they were read from."""

    found: list[dict[str, Any]]
    matched: list[dict[str, Any]] | None
    index: GisIndex


def object_label(index: GisIndex, rel: dict[str, Any]) -> str | None:
    """The label of an entity object (``near``); None for other objects, whose value is their name."""
    row = index.row_of.get(rel["object"]) if rel["object_kind"] == "entity" else None
    return None if row is None else index.entities[row]["label"]


class FactsService:
    def __init__(self, state: ServingState) -> None:
        self.state = state

    def triples(
        self,
        snap: Snapshot,
        role: Role,
        subject: str | None = None,
        name: str | None = None,
        predicate: str | None = None,
        object: str | None = None,
    ) -> Facts:
        """Triples matching the given parts (each optional; counties, programs and organizations match without
        case, counties also without "County"); ``name`` finds subjects by label (``livemem.gbim.find_entities``)."""
        index = gis_index(snap)
        wanted_object = lower_without_county(object) if object else None
        visible = [e for e in index.entities if e["access"] in role.access]
        matched = find_entities(visible, name) if name else None
        if matched is not None:
            visible = matched
        found = []
        for entity in visible:
            if subject and entity["entity_id"] != subject:
                continue
            for rel in index.relations.get(entity["entity_id"], ()):
                if predicate and rel["predicate"] != predicate:
                    continue
                if wanted_object and lower_without_county(rel["object"]) != wanted_object:
                    continue
                found.append({**rel, "subject_label": entity["label"], "object_label": object_label(index, rel)})
        return Facts(found, matched, index)

    def of_entity(self, entity_id: str, role: Role, predicate: str | None = None) -> dict[str, Any]:
        """The ``EntityFacts`` body of one entity: its label, county and relations (of ``predicate`` only, when
        given); one the role may not read is a 404 exactly like one that does not exist."""
        snap = self.state.reader.snapshot()
        entity, relations = self.state.gis.entity(snap, entity_id, role)
        return {
            "entity_id": entity_id,
            "label": entity["label"],
            "county": entity["county"],
            "relations": [r for r in relations if predicate is None or r["predicate"] == predicate],
            "index_version": snap.version_id,
        }
