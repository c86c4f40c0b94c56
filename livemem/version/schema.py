"""Every table of a version's ``tables.duckdb``, the step that writes it, and the layout number: declared once.

A version holds the chunk step's membership and its own small tables, and beside them what the other steps stage:
the registry's, GBIM's and the attention rollup's tables (``docs/version-format.md``). Each step creates its
tables from here (``create_sql``), a build copies the tables other steps own unchanged (``owned_by``), and
``LAYOUT_VERSION`` is what the manifest records and the reader serves. The GBIM tables' names and columns, which
the export writes and serving reads, are declared here too (``ENTITY_COLUMNS``, ``RELATION_COLUMNS``). ``tests/unit/test_version_schema.py`` checks
that what the steps create is exactly what is declared, column for column.

No PRIMARY KEY on the chunk step's tables: an ART index over 123k chunk ids is 11 MB of a version's 15 MB own
files, copied by every build and attention publish. The ids are unique by construction (one row per chunk of the
``chunks`` view); ``check_index_complete`` checks it.
"""

from __future__ import annotations

from dataclasses import dataclass

# bump when a version's files change shape: older versions are then rebuilt by the next build, never served (3:
# membership as deletions; 2: membership as one row per held row; 1: full copies)
LAYOUT_VERSION = 3

CHUNKS, REGISTRY, GBIM, ATTENTION = "chunks", "registry", "gbim", "attention"  # the steps that write a version

# The GBIM export's tables (below) as the export writes and serving reads them (``livemem.gbim.export``,
# ``livemem.query.gis_index``): their names and columns, in table order.
ENTITY_TABLE = "gbim_entities"
RELATION_TABLE = "gbim_relations"
FLAG_COLUMNS = ("geometry_repaired", "outside_region", "county_disagreement")
ENTITY_COLUMNS = (
    "entity_id", "source", "worldview_id", "dataset", "county", "gbim_entity", "label", "description", "centroid_x",
    "centroid_y", "srid", "lon", "lat", "source_table", "source_pk", "attributes", "access", "collection",
    "geometry_type", "county_source", "county_spatial", *FLAG_COLUMNS,
)  # fmt: skip
RELATION_COLUMNS = ("subject", "predicate", "object", "object_kind", "provenance")


@dataclass(frozen=True)
class VersionTable:
    """A table of ``tables.duckdb``: its columns as ``CREATE TABLE`` takes them, and the step that creates it (and
    whose build or publish carries it forward; every other step copies it unchanged)."""

    name: str
    step: str
    columns: str
    kept: bool = False  # created only where missing: its rows accumulate across versions (registry history)

    def create(self) -> str:
        exists = "IF NOT EXISTS " if self.kept else ""
        return f"CREATE TABLE {exists}{self.name} ({self.columns});\n"


TABLES: dict[str, VersionTable] = {
    t.name: t
    for t in (
        # the chunk step: membership (the segments a version holds and the rows of them it does not hold: deletion
        # vectors, as Lucene's .liv files, Iceberg's / Delta's delete files; ``livemem.version.segments``) ...
        VersionTable(
            "held_segments", CHUNKS, "segment VARCHAR NOT NULL, chunks INTEGER NOT NULL, parents INTEGER NOT NULL"
        ),
        VersionTable("chunk_deletes", CHUNKS, "segment VARCHAR NOT NULL, seg_row INTEGER NOT NULL"),
        VersionTable("parent_deletes", CHUNKS, "segment VARCHAR NOT NULL, seg_row INTEGER NOT NULL"),
        # ... and what else it writes (``livemem.ingest.layout``; created empty by ``livemem.version.staging``); the
        # attention rollup rewrites ``attention``'s rows
        VersionTable(
            "skipped_files",
            CHUNKS,
            "source VARCHAR NOT NULL, path VARCHAR NOT NULL, blob_sha VARCHAR NOT NULL, size BIGINT NOT NULL, "
            "reason VARCHAR NOT NULL",
        ),
        VersionTable(
            "attention",
            CHUNKS,
            "chunk_id VARCHAR NOT NULL, attention_score DOUBLE NOT NULL DEFAULT 0, last_breath_seen VARCHAR",
        ),
        VersionTable("chunk_lineage", CHUNKS, "chunk_id VARCHAR NOT NULL, predecessors VARCHAR[] NOT NULL"),
        # the registry verification (``livemem.registry.stage``)
        VersionTable(
            "registry",
            REGISTRY,
            "local_resource_id VARCHAR PRIMARY KEY, name VARCHAR NOT NULL, description VARCHAR, "
            "resource_type VARCHAR NOT NULL, county VARCHAR NOT NULL, zip VARCHAR NOT NULL, "
            "zip_coverage VARCHAR[] NOT NULL, "
            "address VARCHAR, contact_phone VARCHAR, contact_email VARCHAR, url VARCHAR, eligibility VARCHAR, "
            "hours VARCHAR, "
            "verification_status VARCHAR NOT NULL, last_verified_at VARCHAR, verified_by VARCHAR, "
            "deprecated_at VARCHAR, "
            # registry-v2: the HSDS fields (object lists as JSON text: ``livemem.registry.fields.decode_published``)
            "organization VARCHAR, resource_types VARCHAR[] NOT NULL, taxonomy_terms VARCHAR, phones VARCHAR, "
            "languages VARCHAR[] NOT NULL, accessibility VARCHAR, fees VARCHAR, service_area VARCHAR, state VARCHAR, "
            "listed_at VARCHAR, source_id VARCHAR, schedules VARCHAR, "
            "status VARCHAR NOT NULL, verified_as_of VARCHAR, flagged_fields VARCHAR[] NOT NULL, "
            "source_row INTEGER NOT NULL, content_hash VARCHAR NOT NULL",
        ),
        VersionTable(
            "registry_issues",
            REGISTRY,
            "source_row INTEGER NOT NULL, local_resource_id VARCHAR, rule VARCHAR NOT NULL, severity VARCHAR NOT NULL, "
            "message VARCHAR NOT NULL",
        ),
        VersionTable(
            "registry_history",
            REGISTRY,
            "local_resource_id VARCHAR NOT NULL, change VARCHAR NOT NULL, valid_from VARCHAR NOT NULL, "
            "valid_to VARCHAR, "
            "version_id VARCHAR NOT NULL, content_hash VARCHAR, verification_hash VARCHAR, status VARCHAR, "
            "last_verified_at VARCHAR, deprecated_at VARCHAR, note VARCHAR, data VARCHAR",
            kept=True,
        ),
        # the GBIM export (``livemem.gbim.export``)
        VersionTable(
            ENTITY_TABLE,
            GBIM,
            "entity_id VARCHAR PRIMARY KEY, source VARCHAR NOT NULL, worldview_id VARCHAR NOT NULL, "
            "dataset VARCHAR NOT NULL, "
            "county VARCHAR, gbim_entity VARCHAR NOT NULL, label VARCHAR NOT NULL, description VARCHAR NOT NULL, "
            "centroid_x DOUBLE, centroid_y DOUBLE, srid INTEGER NOT NULL, lon DOUBLE, lat DOUBLE, "
            "source_table VARCHAR NOT NULL, source_pk VARCHAR NOT NULL, attributes VARCHAR NOT NULL, "
            "access VARCHAR NOT NULL, "
            "collection VARCHAR NOT NULL, geometry_type VARCHAR NOT NULL, county_source VARCHAR, "
            "county_spatial VARCHAR, "
            "geometry_repaired BOOLEAN NOT NULL, outside_region BOOLEAN NOT NULL, "
            "county_disagreement BOOLEAN NOT NULL",
        ),
        VersionTable(
            RELATION_TABLE,
            GBIM,
            "subject VARCHAR NOT NULL, predicate VARCHAR NOT NULL, object VARCHAR NOT NULL, "
            "object_kind VARCHAR NOT NULL, "
            "provenance VARCHAR NOT NULL",
        ),
        # the attention rollup (``livemem.usage.attention``): chunks used together, and the questions a chunk was
        # confirmed useful for (vectors of the serving model)
        VersionTable("related_chunks", ATTENTION, "chunk_id VARCHAR, related_id VARCHAR, weight DOUBLE"),
        VersionTable(
            "attention_questions", ATTENTION, "chunk_id VARCHAR, question_key VARCHAR, vector FLOAT[], weight DOUBLE"
        ),
    )
}
# The chunk step's views over its segments' Parquet files (``livemem.version.segments.create_views``).
VIEWS: dict[str, str] = {
    name: CHUNKS for name in ("chunks", "parents", "chunk_parts", "parent_parts", "chunk_members", "parent_members")
}
STEPS = (CHUNKS, REGISTRY, GBIM, ATTENTION)


def create_sql(*names: str) -> str:
    """``CREATE TABLE`` statements of the named tables, in that order."""
    return "".join(TABLES[name].create() for name in names)


def owned_by(step: str) -> tuple[str, ...]:
    """The tables (and views) ``step`` creates, in declaration order."""
    return tuple(t.name for t in TABLES.values() if t.step == step) + tuple(
        name for name, owner in VIEWS.items() if owner == step
    )
