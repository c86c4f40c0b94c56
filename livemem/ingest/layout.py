"""The chunk step's part of a version: its layout number and its tables (the segments hold the chunk rows; these
hold what else the step writes, beside the membership of ``livemem.version.segments``)."""

from __future__ import annotations

import duckdb

from livemem.version.segments import MEMBERS_SQL, create_views

# No PRIMARY KEY on the per-version tables: an ART index over 123k chunk ids is 11 MB of a version's 15 MB own
# files, copied by every build and attention publish. The ids are unique by construction (one row per chunk of the
# ``chunks`` view); ``check_index_complete`` checks it.
SCHEMA_SQL = (
    """
CREATE TABLE skipped_files (
    source VARCHAR NOT NULL, path VARCHAR NOT NULL, blob_sha VARCHAR NOT NULL, size BIGINT NOT NULL,
    reason VARCHAR NOT NULL
);
CREATE TABLE attention (
    chunk_id VARCHAR NOT NULL, attention_score DOUBLE NOT NULL DEFAULT 0, last_breath_seen VARCHAR
);
CREATE TABLE chunk_lineage (chunk_id VARCHAR NOT NULL, predecessors VARCHAR[] NOT NULL);
"""
    + MEMBERS_SQL
)
LAYOUT_VERSION = 3  # bump when a version's files change shape; older versions are then rebuilt, not reused
CHUNK_TABLES = (
    "chunks", "parents", "chunk_parts", "parent_parts", "chunk_members", "parent_members", "held_segments",
    "chunk_deletes", "parent_deletes", "skipped_files", "attention", "chunk_lineage",
)  # fmt: skip
SKIP_COLUMNS = ("source", "path", "blob_sha", "size", "reason")


def init_chunk_tables(con: duckdb.DuckDBPyConnection) -> None:
    """The chunk step's tables and views, empty: a version staged by another step on an empty index is complete."""
    con.execute(SCHEMA_SQL)
    create_views(con, [])
