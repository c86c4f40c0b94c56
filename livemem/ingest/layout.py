"""The chunk step's part of a version: its tables (``livemem.version.schema`` declares them: the membership of
``livemem.version.segments`` and what else the step writes) and views; the segments hold the chunk rows."""

from __future__ import annotations

import duckdb

from livemem.version.schema import CHUNKS, create_sql, owned_by
from livemem.version.segments import MEMBERS_SQL, create_views

SCHEMA_SQL = create_sql("skipped_files", "attention", "chunk_lineage") + MEMBERS_SQL
CHUNK_TABLES = owned_by(CHUNKS)  # tables and views: a build writes them, and copies every other step's tables
SKIP_COLUMNS = ("source", "path", "blob_sha", "size", "reason")


def init_chunk_tables(con: duckdb.DuckDBPyConnection) -> None:
    """The chunk step's tables and views, empty: a version staged by another step on an empty index is complete."""
    con.execute(SCHEMA_SQL)
    create_views(con, [])
