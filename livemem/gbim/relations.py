"""Relations between entities (``serves_program``, ``operated_by``, ``near``) and finding entities by name."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

NEAR_KM = 10.0  # two entities this close (great-circle distance between centroids) are ``near`` each other
NEAR_MAX = 5  # ``near`` relations per entity at most, nearest first (a dense town stays readable)
PROGRAM_FIELDS = ("programs", "program")
OPERATOR_FIELDS = ("operator", "operated_by")


def _listed(value: Any) -> list[str]:
    """A list attribute, or a ``;`` / ``,`` separated string, as clean distinct strings."""
    items = value if isinstance(value, list) else str(value or "").replace(";", ",").split(",")
    return list(dict.fromkeys(str(v).strip() for v in items if str(v).strip()))


def linked_relations(entities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Relations beyond an entity's own place fields, where the data carries them: ``serves_program`` (each item
    of a ``programs`` attribute; object_kind ``program``), ``operated_by`` (an ``operator`` attribute;
    ``organization``) and ``near`` (the ``NEAR_MAX`` nearest other entities of the same access level within
    ``NEAR_KM`` km of its centroid; object_kind ``entity``, the distance in the provenance)."""
    out: list[dict[str, Any]] = []
    for e in entities:
        base = {"source": e["source"], "source_table": e["source_table"], "source_pk": e["source_pk"]}
        attrs = e.get("attributes") or {}
        for predicate, fields, kind in (
            ("serves_program", PROGRAM_FIELDS, "program"),
            ("operated_by", OPERATOR_FIELDS, "organization"),
        ):
            name = next((f for f in fields if attrs.get(f)), None)
            for value in _listed(attrs.get(name)) if name else []:
                out.append(
                    {
                        "subject": e["entity_id"], "predicate": predicate, "object": value, "object_kind": kind,
                        "provenance": {**base, "method": "attribute", "field": name},
                    }
                )  # fmt: skip
    out.extend(_near_relations(entities))
    return out


def _near_relations(entities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from livemem.geo.distance import haversine_km

    placed = [e for e in entities if e.get("lat") is not None and e.get("lon") is not None]
    if len(placed) < 2:
        return []
    lat = np.array([e["lat"] for e in placed], dtype=np.float64)
    lon = np.array([e["lon"] for e in placed], dtype=np.float64)
    # Candidates from a coarse box first (0.1° of latitude ≈ 11 km), so a large export is not all pairs.
    cell = np.floor(lat / (NEAR_KM / 111.0)).astype(np.int64)
    order = np.argsort(cell, kind="stable")
    sorted_cells = cell[order]
    out: list[dict[str, Any]] = []
    for i, e in enumerate(placed):
        lo = np.searchsorted(sorted_cells, cell[i] - 1, side="left")
        hi = np.searchsorted(sorted_cells, cell[i] + 1, side="right")
        others = order[lo:hi]
        others = others[others != i]
        if not others.size:
            continue
        distance = haversine_km(lat[others], lon[others], lat[i], lon[i])
        within = distance <= NEAR_KM
        others, distance = others[within], distance[within]
        base = {"source": e["source"], "source_table": e["source_table"], "source_pk": e["source_pk"]}
        kept = 0
        for j in np.lexsort((others, distance)):
            other = placed[int(others[j])]
            if other["access"] != e["access"]:
                continue  # a public entity's facts never name an internal one
            out.append(
                {
                    "subject": e["entity_id"], "predicate": "near", "object": other["entity_id"],
                    "object_kind": "entity",
                    "provenance": {**base, "method": "great-circle distance between centroids",
                                   "distance_km": round(float(distance[j]), 2), "within_km": NEAR_KM},
                }
            )  # fmt: skip
            kept += 1
            if kept == NEAR_MAX:
                break
    return out


def normalize_name(text: str) -> str:
    """A name as compared: case-folded, without a parenthetical remark, punctuation or repeated spaces."""
    text = re.sub(r"\([^)]*\)", " ", text.casefold())
    return " ".join(re.sub(r"[^\w\s]", " ", text).split())


def find_entities(entities: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """Entities whose label matches ``name``: the exact label first, then labels starting with it, then labels
    holding every word of it; none when nothing matches."""
    wanted = normalize_name(name)
    if not wanted:
        return []
    words = set(wanted.split())
    ranked = []
    for e in entities:
        label = normalize_name(e["label"])
        if label == wanted:
            rank = 0
        elif label.startswith(wanted + " ") or wanted.startswith(label + " "):
            rank = 1
        elif words <= set(label.split()):
            rank = 2
        else:
            continue
        ranked.append((rank, e["label"], e))
    ranked.sort(key=lambda r: (r[0], r[1]))
    return [e for _, _, e in ranked]
