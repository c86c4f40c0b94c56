"""The blocking checks on a staged version's GBIM entities."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from livemem.query.gis_index import GIS, has_gbim_tables, read_entities
from livemem.schemas import errors_for
from livemem.version import connect
from livemem.version.schema import ENTITY_TABLE
from livemem.version.staging import MAX_REPORTED, CheckOutcome


def _entities_of(version_dir: Path) -> list[dict[str, Any]] | None:
    con = connect(version_dir)
    try:
        return read_entities(con) if has_gbim_tables(con) else None
    finally:
        con.close()


def check_entities_valid(version_dir: Path) -> CheckOutcome:
    """Every entity is valid per ``schemas/gbim_entity.schema.json`` (which bounds lon/lat) and the GIS snapshot
    lists exactly the entities of the tables."""
    entities = _entities_of(version_dir)
    if entities is None:
        return CheckOutcome(True, "the version holds no GBIM entities")
    failures = []
    for e in entities:
        problems = errors_for("gbim_entity", e)
        if problems:
            failures.append(f"{e['source']} {e['source_pk']} ({e['entity_id']}): {'; '.join(problems)}")
    ids_file = version_dir / GIS / "ids.json"
    listed = json.loads(ids_file.read_text(encoding="utf-8")) if ids_file.is_file() else None
    if listed is None or sorted(listed) != sorted(e["entity_id"] for e in entities):
        failures.append(f"{GIS}/ids.json does not list exactly the {len(entities)} entities of {ENTITY_TABLE}")
    summary = f"{len(entities) - len(failures)} of {len(entities)} GBIM entities are schema-valid with lon/lat in range"
    return CheckOutcome(not failures, summary, failures[:MAX_REPORTED], len(entities))


def check_entity_flags(version_dir: Path) -> CheckOutcome:
    """Advisory: entities far outside the configured region, or whose county attribute and polygon disagree."""
    entities = _entities_of(version_dir)
    if entities is None:
        return CheckOutcome(True, "the version holds no GBIM entities")
    failures = []
    for e in entities:
        where = f"{e['source']} {e['source_pk']} {e['label']!r}"
        if e["flags"]["outside_region"]:
            failures.append(f"{where}: far outside the region (lon {e['lon']}, lat {e['lat']})")
        if e["flags"]["county_disagreement"]:
            failures.append(f"{where}: county attribute {e['county']!r} but inside {e['county_spatial']!r}")
    summary = (
        f"{len(failures)} flag(s) on {len(entities)} entities (outside region / county disagreement)"
        if failures
        else f"no flags on {len(entities)} entities"
    )
    return CheckOutcome(not failures, summary, failures[:MAX_REPORTED], len(entities))
