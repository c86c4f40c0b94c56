"""The index version format: one owner for names, schema, shared parts, membership and opening a version.

A version is a small directory (``versions/<id>/``: manifest, a small ``tables.duckdb``, the GBIM export) over
immutable **segments** shared by every version that uses them (``<home>/parts/seg-<hash>/``, content-addressed:
the name is the hash of the files' hashes). A build writes one segment holding only the chunks and files it
(re)built: their rows (Parquet), vectors (``dense.npy``) and BM25 postings (``postings.npz``). Which rows of which
segments a version holds is its **membership**: the segments it holds (``held_segments``) less the rows it has
deleted from them (``chunk_deletes`` / ``parent_deletes``: segment, row), so a build writes what changed, never a
row per unchanged chunk. The version's ``chunk_members`` / ``parent_members`` (the held rows), ``chunks`` and
``parents`` are views over its segments' Parquet files, so every SQL reader keeps reading tables called ``chunks``
and ``parents``. A nightly attention publish copies only the small tables.

Opening a version's ``tables.duckdb`` must go through ``connect`` (or ``use_parts`` on a connection that ATTACHes
one): the views name segment files relative to ``<home>/parts``, found through DuckDB's ``file_search_path``.

Segments are merged when a version would hold too many of them or too little of one (``merge_plan``), like
Lucene's merge policy; retention removes segments no kept or staged version names (``gc_parts``).

This package is the format only: a version is loaded for queries (the ``Snapshot``, the versions a process holds
open) by ``livemem.engine``, which imports it; nothing here imports the engine, the query side or the scorers
(``DenseRows``, ``SparseScorer``: ``pyproject.toml``'s import contracts).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb

PARTS = "parts"
BLOCK_SIZE = 16384  # bytes per block of a version's tables.duckdb


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
    from livemem.version.catalog import TABLES

    # 16 KiB blocks for a file created here (DuckDB's default is 256 KiB): a version's tables are small (a table of
    # a few rows took a whole block), and every version and attention publish writes its own file
    config: dict[str, Any] = {} if read_only else {"default_block_size": str(BLOCK_SIZE)}
    con = duckdb.connect(str(Path(version_dir) / TABLES), read_only=read_only, config=config)
    try:
        use_parts(con, version_dir)
    except Exception:
        con.close()
        raise
    return con
