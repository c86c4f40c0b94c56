"""The index version format: one owner for names, schema, shared parts, membership and opening a version.

A version is a small directory (``versions/<id>/``: manifest, a small ``tables.duckdb``, the GBIM export) over
immutable **segments** shared by every version that uses them (``<home>/parts/seg-<hash>/``, content-addressed:
the name is the hash of the files' hashes). A build writes one segment holding only the chunks and files it
(re)built: their rows (Parquet), vectors (``dense.npy``) and BM25 postings (``postings.npz``). Which rows of which
segments a version holds is its **membership** (``chunk_members`` / ``parent_members``: segment, row), and the
version's ``chunks`` and ``parents`` are views over its segments' Parquet files restricted to its members, so every
SQL reader keeps reading tables called ``chunks`` and ``parents``. Carrying an unchanged file over writes two
integers; a nightly attention publish copies only the small tables.

Opening a version's ``tables.duckdb`` must go through ``connect`` (or ``use_parts`` on a connection that ATTACHes
one): the views name segment files relative to ``<home>/parts``, found through DuckDB's ``file_search_path``.

Segments are merged when a version would hold too many of them or too little of one (``merge_plan``), like
Lucene's merge policy; retention removes segments no kept or staged version names (``gc_parts``).
"""

from __future__ import annotations

from pathlib import Path

import duckdb

PARTS = "parts"


def parts_dir(version_dir: Path) -> Path:
    """The shared parts of the home a version (published ``versions/<id>`` or staged ``staging/<id>``) lives in."""
    return Path(version_dir).resolve().parent.parent / PARTS


def use_parts(con: duckdb.DuckDBPyConnection, *version_dirs: Path) -> None:
    """Let ``con`` resolve the segment files named by the views of the given versions (of one or more homes)."""
    paths = sorted({str(parts_dir(v)) for v in version_dirs})
    joined = ",".join(paths).replace("'", "''")
    con.execute(f"SET GLOBAL file_search_path = '{joined}'")  # GLOBAL: cursors of ``con`` see it too


def connect(version_dir: Path, read_only: bool = True) -> duckdb.DuckDBPyConnection:
    """Open a version's ``tables.duckdb`` with its segments resolvable."""
    from livemem.store import TABLES

    con = duckdb.connect(str(Path(version_dir) / TABLES), read_only=read_only)
    try:
        use_parts(con, version_dir)
    except Exception:
        con.close()
        raise
    return con
