"""The version format's one declaration (``livemem.version.schema``): what every step creates in a version's
``tables.duckdb`` is exactly what is declared there, table for table and column for column, and a build copies
every table another step owns."""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest

from livemem.duck import registered
from livemem.gbim.export import ENTITY_SQL
from livemem.ingest import layout
from livemem.registry.stage import HISTORY_SQL, REGISTRY_SQL
from livemem.usage import attention
from livemem.version import schema, staging

pytestmark = pytest.mark.unit

COLUMNS = (
    "SELECT table_name, column_name, data_type, is_nullable, column_default FROM duckdb_columns() "
    "WHERE database_name = current_database() AND NOT internal ORDER BY table_name, column_index"
)


def every_step_creates(con: duckdb.DuckDBPyConnection) -> None:
    """Each step's own statements, on an empty version: chunks, registry, GBIM, then the attention rollup."""
    staging.init_chunk_tables(con)
    con.execute(REGISTRY_SQL + HISTORY_SQL + ENTITY_SQL)
    pairs = pd.DataFrame({"trace": pd.Series([], dtype="string"), "chunk_id": pd.Series([], dtype="string")})
    with registered(con, pairs, "pairs") as name:
        attention._apply_related(con, None, name, 0.1)
    attention.apply_questions(con, None, [], 0.1, embed=None)


def described(con: duckdb.DuckDBPyConnection) -> tuple[list, list]:
    tables = con.execute(
        "SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = 'main' ORDER BY 1"
    ).fetchall()
    return tables, con.execute(COLUMNS).fetchall()


def test_what_the_steps_create_is_what_the_schema_declares() -> None:
    built = duckdb.connect()
    every_step_creates(built)
    tables, columns = described(built)
    assert {name for name, kind in tables if kind == "BASE TABLE"} == set(schema.TABLES)
    assert {name for name, kind in tables if kind == "VIEW"} == set(schema.VIEWS)
    declared = duckdb.connect()
    declared.execute(schema.create_sql(*schema.TABLES))
    # the attention rollup fills its tables from a query: its columns must come out as declared too
    assert [c for c in columns if c[0] in schema.TABLES] == declared.execute(COLUMNS).fetchall()
    constraints = "SELECT table_name, constraint_type, constraint_column_names FROM duckdb_constraints() ORDER BY ALL"
    assert built.execute(constraints).fetchall() == declared.execute(constraints).fetchall()


def test_every_table_has_one_step_and_a_build_copies_the_others() -> None:
    assert {t.step for t in schema.TABLES.values()} | set(schema.VIEWS.values()) == set(schema.STEPS)
    owned = [name for step in schema.STEPS for name in schema.owned_by(step)]
    assert sorted(owned) == sorted([*schema.TABLES, *schema.VIEWS])  # each name has exactly one owner
    assert schema.owned_by(schema.CHUNKS) == layout.CHUNK_TABLES  # a build keeps these and copies the rest
    for name in (schema.ENTITY_TABLE, schema.RELATION_TABLE):  # what serving reads is declared
        assert schema.TABLES[name].step == schema.GBIM
    assert schema.TABLES["registry_history"].create().startswith("CREATE TABLE IF NOT EXISTS")  # it accumulates
