"""The staging contract every step that writes a version follows: the chunk step, the registry verification, the
GBIM export and the attention rollup.

A staged version is checked before it is published: each check returns a ``CheckOutcome`` (whether it passed, a
one-line summary, and the failing items, at most ``MAX_REPORTED`` of them, so a person auditing in the Dagster UI
sees what to fix). A step that stages the first version of an empty index creates the chunk step's tables and views
empty (``init_chunk_tables``), so the version is complete for serving and for the chunk builds after it; every
manifest records the governance caps and whether the version respects them (``governance_status``). The chunk
step's own checks live with it (``livemem.ingest.checks``), as do the registry's and GBIM's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import duckdb

from livemem.sources.config import Governance
from livemem.version.schema import create_sql
from livemem.version.segments import MEMBERS_SQL, create_views

MAX_REPORTED = 20
# the chunk step's tables (``livemem.version.schema`` declares them): its membership and what else it writes
CHUNK_SCHEMA_SQL = create_sql("skipped_files", "attention", "chunk_lineage") + MEMBERS_SQL


@dataclass
class CheckOutcome:
    passed: bool
    summary: str
    failures: list[str] = field(default_factory=list)
    checked: int = 0


def init_chunk_tables(con: duckdb.DuckDBPyConnection) -> None:
    """The chunk step's tables and views, empty: a version staged by another step on an empty index is complete."""
    con.execute(CHUNK_SCHEMA_SQL)
    create_views(con, [])


def governance_status(total_chunks: int, size_mb: float, gov: Governance) -> dict[str, Any]:
    """The governance caps and whether a version respects them."""
    violations = []
    if total_chunks > gov.max_chunks:
        violations.append(f"{total_chunks} chunks exceed the cap of {gov.max_chunks}")
    if size_mb > gov.max_size_mb:
        violations.append(f"{size_mb} MB exceed the cap of {gov.max_size_mb} MB")
    return {
        "max_chunks": gov.max_chunks,
        "max_size_mb": gov.max_size_mb,
        "status": "exceeded" if violations else "ok",
        "violations": violations,
    }
