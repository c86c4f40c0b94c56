"""Handing pandas frames to DuckDB by an explicit, unique name.

DuckDB's replacement scans resolve ``FROM frame`` to a Python variable only when no catalog object of that name
exists: a temp table or a table of an attached database with the same name silently wins (a build once carried
the first source's path list into every later source that way). Every frame the project hands to SQL is
registered under a fresh name and unregistered afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import duckdb
import pandas as pd


@contextmanager
def registered(con: duckdb.DuckDBPyConnection, frame: pd.DataFrame, stem: str = "frame") -> Iterator[str]:
    """Register ``frame`` as a view with a name no catalog object can shadow; yields the (quoted-safe) name."""
    name = f"_lm_{stem}_{uuid.uuid4().hex}"
    con.register(name, frame)
    try:
        yield name
    finally:
        con.unregister(name)


def sql_literal(value: str) -> str:
    """A SQL string literal (DuckDB strings have no backslash escapes: doubling the quote is the whole escape).
    For values DuckDB needs as literals, e.g. so Parquet row groups can be pruned by their statistics."""
    return "'" + value.replace("'", "''") + "'"


def sql_literals(values: list[str]) -> str:
    """``a, b, c`` as SQL string literals, for ``IN (...)``."""
    return ", ".join(sql_literal(v) for v in values)
