"""What a new version keeps of its base: the parts other steps own, the rows of unchanged files (named in the
membership, never copied), and the attention and lineage of kept and edited chunks.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import duckdb
import pandas as pd

from livemem.duck import registered, sql_literal, sql_literals
from livemem.ingest.layout import CHUNK_TABLES, SKIP_COLUMNS
from livemem.ingest.plan import Base, FilePlan
from livemem.version.store import CHROMA, MANIFEST, TABLES


def carry_other_parts(con: duckdb.DuckDBPyConnection, base_dir: Path, staged: Path) -> None:
    """Copy what other steps own (registry, spatial entities, ... tables and directories) unchanged."""
    tables = con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_catalog = 'base' AND table_schema = 'main' "
        "AND table_type = 'BASE TABLE'"
    ).fetchall()
    for (table,) in tables:
        if table not in CHUNK_TABLES:  # views are the chunk step's (information_schema lists them too)
            con.execute(f'CREATE TABLE "{table}" AS SELECT * FROM base."{table}"')
    for entry in base_dir.iterdir():
        if entry.name not in (TABLES, CHROMA, "retrieval", MANIFEST) and not entry.name.startswith(TABLES):
            copy = shutil.copytree if entry.is_dir() else shutil.copy2
            copy(entry, staged / entry.name)


@dataclass
class CarryOver:
    """What the base's rows become (``members``), from the plans: sources whose rows are looked at (others are
    dropped), (source, path) pairs dropped, and per source planned from a full comparison, the paths kept."""

    sources: list[str] = field(default_factory=list)
    drop_paths: list[tuple[str, str]] = field(default_factory=list)
    keep_only: list[tuple[str, str]] = field(default_factory=list)
    keep_only_sources: list[str] = field(default_factory=list)

    def add(self, plan: FilePlan) -> None:
        """What a source's plan keeps of the base (the source itself is in ``sources`` already)."""
        if plan.carry_all_but is not None:
            self.drop_paths += [(plan.source.name, p) for p in plan.carry_all_but]
        else:
            self.keep_only_sources.append(plan.source.name)
            self.keep_only += [(plan.source.name, p) for p in plan.carried]

    def members(self, con: duckdb.DuckDBPyConnection, base: Base) -> None:
        """Keep the base's rows of unchanged files: name their (segment, row) in this version's membership and copy
        their skipped-file rows. ``dropped_chunks`` (temp) lists the base's chunks that are not kept, for attention
        and counts. With the quick plan this costs a lookup of the touched paths (Parquet statistics skip the rest)
        and a copy of the base's membership (integers); nothing per chunk in Python."""
        empty = (
            "CREATE TEMP TABLE dropped_chunks AS SELECT NULL::VARCHAR AS _seg, NULL::INTEGER AS _row, "
            "NULL::VARCHAR AS chunk_id, NULL::VARCHAR AS source, NULL::VARCHAR AS path, NULL::VARCHAR AS heading_path "
            "WHERE false"
        )
        if base.dir is None:
            con.execute(empty)
            return
        if not base.segmented:  # an older layout: nothing is shared, every base chunk is replaced
            con.execute(
                "CREATE TEMP TABLE dropped_chunks AS SELECT NULL::VARCHAR AS _seg, NULL::INTEGER AS _row, "
                "chunk_id, source, path, heading_path FROM base.chunks"
            )
            return
        # which base rows go: sources no longer configured; the touched paths of a quick plan; every path but the
        # carried ones of a full comparison. Literal lists, so DuckDB prunes Parquet row groups by their statistics.
        conditions = [f"p.source NOT IN ({sql_literals(self.sources)})"] if self.sources else ["true"]
        by_source: dict[str, list[str]] = {}
        for source, path in self.drop_paths:
            by_source.setdefault(source, []).append(path)
        conditions += [
            f"(p.source = {sql_literal(s)} AND p.path IN ({sql_literals(ps)}))" for s, ps in by_source.items()
        ]
        keep: dict[str, list[str]] = {s: [] for s in self.keep_only_sources}
        for source, path in self.keep_only:
            keep[source].append(path)
        with registered(con, pd.DataFrame(self.keep_only, columns=["source", "path"], dtype=object), "keep") as kept:
            for source in keep:
                conditions.append(
                    f"(p.source = {sql_literal(source)} AND p.path NOT IN "
                    f"(SELECT path FROM {kept} WHERE source = {sql_literal(source)}))"
                )
            con.execute("INSERT INTO held_segments SELECT * FROM base.held_segments")
            for kind in ("chunk", "parent"):
                extra = ", p.chunk_id, p.source, p.path, p.heading_path" if kind == "chunk" else ""
                selects = " UNION ALL ".join(
                    f"SELECT p._seg, p._row{extra} FROM base.{kind}_parts p WHERE {c}" for c in conditions
                )
                con.execute(
                    f"CREATE TEMP TABLE dropped_{kind}s AS SELECT DISTINCT d.* FROM ({selects}) d "
                    f"ANTI JOIN base.{kind}_deletes x ON d._seg = x.segment AND d._row = x.seg_row"
                )
                con.execute(
                    f"INSERT INTO {kind}_deletes SELECT segment, seg_row FROM base.{kind}_deletes "
                    f"UNION ALL SELECT _seg, _row FROM dropped_{kind}s"
                )
            gone = " OR ".join(conditions)
            con.execute(f"INSERT INTO skipped_files SELECT * FROM base.skipped_files p WHERE NOT ({gone})")


def record_change(con: duckdb.DuckDBPyConnection, skips: list[dict[str, Any]], fresh: str, base: Base) -> None:
    """Add the rebuilt files' skipped-file rows; list the change (temp tables ``removed``: base chunks gone from
    this version, ``fresh_only``: chunks the base did not hold); pass attention on (``inherit_attention``).
    ``fresh``: the table of the rebuilt chunk rows' ``chunk_id, source, path, heading_path``
    (``SegmentFlusher.fresh_table``)."""
    if skips:
        with registered(con, pd.DataFrame(skips, columns=list(SKIP_COLUMNS)), "skipped_files") as frame:
            con.execute(f"INSERT INTO skipped_files SELECT * FROM {frame}")
    # removed: base chunks gone from this version; fresh_only: chunks the base did not hold. Rebuilt paths' rows
    # are all dropped and carried rows are never rebuilt, so both come from the change alone.
    con.execute(
        "CREATE TEMP TABLE removed AS SELECT chunk_id, source, path, heading_path FROM dropped_chunks "
        f"WHERE chunk_id NOT IN (SELECT chunk_id FROM {fresh})"
    )
    con.execute(
        f"CREATE TEMP TABLE fresh_only AS SELECT * FROM {fresh} "
        "WHERE chunk_id NOT IN (SELECT chunk_id FROM dropped_chunks)"
    )
    if base.dir is not None:
        inherit_attention(con)


def inherit_attention(con: duckdb.DuckDBPyConnection) -> None:
    """Attention of the new version: kept chunks keep theirs; an edited chunk inherits from the chunk it replaced.

    A chunk id that is new in this version, in a file that had a chunk (now gone) under the same heading path,
    inherits that chunk's attention and last_breath_seen (the one with the most attention when several share
    the heading). ``chunk_lineage`` records the replaced ids, most recent first, so the nightly rollup can
    continue the day-by-day attention of an edited chunk from its predecessor.

    ``attention`` holds only chunks with some (a score or a breath seen); a chunk without a row has score 0.
    Everything here is O(change + chunks with attention): the base's rows are copied minus the removed ones.
    """
    base_lineage = _base_lineage(con)
    _find_heirs(con, base_lineage)
    used = "(a.attention_score <> 0 OR a.last_breath_seen IS NOT NULL)"
    con.execute(
        f"""
        INSERT INTO attention
        SELECT a.chunk_id, a.attention_score, a.last_breath_seen FROM base.attention a
        WHERE {used} AND a.chunk_id NOT IN (SELECT chunk_id FROM removed)
        UNION ALL
        SELECT h.chunk_id, a.attention_score, a.last_breath_seen
        FROM heirs h JOIN base.attention a ON a.chunk_id = h.predecessor WHERE {used}
        """
    )
    con.execute(
        f"""
        INSERT INTO chunk_lineage
        SELECT l.chunk_id, l.predecessors FROM {base_lineage} l
        WHERE l.chunk_id NOT IN (SELECT chunk_id FROM removed)
        UNION ALL
        SELECT h.chunk_id, list_prepend(h.predecessor, COALESCE(pl.predecessors, []::VARCHAR[]))[1:10]
        FROM heirs h LEFT JOIN {base_lineage} pl ON pl.chunk_id = h.predecessor
        """
    )


def _base_lineage(con: duckdb.DuckDBPyConnection) -> str:
    """The base's ``chunk_lineage`` as a table expression (an empty one when the base has none)."""
    base_has_lineage = cast(
        tuple[int],
        con.execute(
            "SELECT COUNT(*) FROM information_schema.tables "
            "WHERE table_catalog = 'base' AND table_name = 'chunk_lineage'"
        ).fetchone(),
    )[0]
    return (
        "base.chunk_lineage"
        if base_has_lineage
        else "(SELECT NULL::VARCHAR AS chunk_id, NULL::VARCHAR[] AS predecessors WHERE false)"
    )


def _find_heirs(con: duckdb.DuckDBPyConnection, base_lineage: str) -> None:
    """The temp table ``heirs``: each new chunk id and the removed chunk (same file and heading path, the one with
    the most attention) it replaces, for the predecessors with usage state or a lineage to pass on."""
    con.execute(
        """
        CREATE TEMP TABLE heirs AS
        WITH r AS (
            SELECT r.chunk_id, r.source, r.path, r.heading_path, COALESCE(a.attention_score, 0) AS score
            FROM removed r LEFT JOIN base.attention a USING (chunk_id)
        )
        SELECT f.chunk_id, arg_max(r.chunk_id, (r.score, r.chunk_id)) AS predecessor
        FROM fresh_only f JOIN r USING (source, path, heading_path)
        GROUP BY f.chunk_id
        """
    )
    # An heir matters only when its predecessor has usage state to pass on (attention, remembered questions,
    # related chunks) or a lineage of its own: otherwise re-chunking a corpus would record (and copy at every
    # later build) a lineage row for every chunk.
    stateful = [base_lineage] + [
        f"base.{table}"
        for table in ("attention", "attention_questions", "related_chunks")
        if cast(
            tuple[int],
            con.execute(
                "SELECT COUNT(*) FROM information_schema.tables WHERE table_catalog = 'base' AND table_name = ?",
                [table],
            ).fetchone(),
        )[0]
    ]
    con.execute(
        "DELETE FROM heirs WHERE predecessor NOT IN ("
        + " UNION ALL ".join(f"SELECT chunk_id FROM {t}" for t in stateful)
        + ")"
    )
