"""The chunk step's checks a staged version must pass before it is published.

Each check returns a ``CheckOutcome`` (the staging contract every step follows: ``livemem.version.staging``):
whether it passed, a one-line summary, and the failing items (capped) so a person auditing in the Dagster UI sees
what to fix.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, cast

import duckdb

from livemem.errors import SourceError
from livemem.index import records
from livemem.ingest.documents import blob_text, document_format
from livemem.ingest.plan import stale_formats
from livemem.schemas import errors_for, validator
from livemem.sources.config import SourcesConfig
from livemem.sources.gitsource import GitSource
from livemem.version import connect
from livemem.version.staging import MAX_REPORTED, CheckOutcome
from livemem.version.store import TABLES


def read_records(version_dir: Path, where: str = "", params: list[Any] | None = None) -> list[dict[str, Any]]:
    """Chunk records of a version (joined with attention), optionally filtered by a SQL condition on ``c``."""
    con = connect(version_dir)
    try:
        cursor = con.execute(
            f"SELECT c.*, a.attention_score, a.last_breath_seen FROM chunks c "
            f"LEFT JOIN attention a USING (chunk_id) {('WHERE ' + where) if where else ''} ORDER BY c.chunk_id",
            params or [],
        )
        names = [d[0] for d in cursor.description]
        rows = [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
    finally:
        con.close()
    return [records.row_to_record(r, r["attention_score"] or 0.0, r["last_breath_seen"]) for r in rows]


def check_chunks_schema(version_dir: Path) -> CheckOutcome:
    """Every chunk record validates against ``schemas/chunk.schema.json``."""
    recs = read_records(version_dir)
    check = validator("chunk")
    failures = []
    for rec in recs:
        if not check.is_valid(rec):
            failures.append(f"{rec['chunk_id']} ({rec['provenance']['path']}): {'; '.join(errors_for('chunk', rec))}")
    summary = f"{len(recs) - len(failures)} of {len(recs)} chunk records are schema-valid"
    return CheckOutcome(not failures, summary, failures[:MAX_REPORTED], len(recs))


def check_sealed_provenance(version_dir: Path, manifest: dict[str, Any]) -> CheckOutcome:
    """Every SEALED chunk's commit exists in its repository and the file at that commit contains the chunk."""
    return check_provenance(version_dir, manifest, sealed_only=True)


def check_provenance(version_dir: Path, manifest: dict[str, Any], sealed_only: bool = False) -> CheckOutcome:
    """Each chunk's (or each sealed chunk's) commit exists and its file at that commit contains the chunk."""
    sealed = read_records(version_dir, "c.seal_state = 'SEALED'" if sealed_only else "")
    by_file: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for rec in sealed:
        prov = rec["provenance"]
        by_file[(rec["source"], prov["commit"], prov["path"])].append(rec)
    failures = []
    repos: dict[str, GitSource | None] = {}
    try:
        for (source, commit, path), recs in by_file.items():
            if source not in repos:
                repo_path = manifest["sources"].get(source, {}).get("repo")
                try:
                    repos[source] = GitSource(Path(repo_path), source) if repo_path else None
                except SourceError as exc:
                    repos[source] = None
                    failures.append(str(exc))
            repo = repos[source]
            if repo is None:
                failures.extend(f"{r['chunk_id']}: repository of source {source!r} unavailable" for r in recs)
                continue
            if not repo.has_commit(commit):
                failures.extend(f"{r['chunk_id']}: commit {commit} not found in {source}" for r in recs)
                continue
            raw = repo.read_file(commit, path)
            if raw is None:
                failures.extend(f"{r['chunk_id']}: {path} does not exist at {commit[:12]}" for r in recs)
                continue
            text = blob_text(path, raw)  # a document: its extracted text
            failures.extend(
                f"{r['chunk_id']}: {path} at {commit[:12]} does not contain the chunk"
                for r in recs
                if r["content"] not in text
            )
    finally:
        for repo in repos.values():
            if repo is not None:
                repo.close()
    kind = "sealed chunks" if sealed_only else "chunks"
    summary = f"{len(sealed) - len(failures)} of {len(sealed)} {kind} resolve to their commit and file"
    return CheckOutcome(not failures, summary, failures[:MAX_REPORTED], len(sealed))


def check_governance(manifest: dict[str, Any]) -> CheckOutcome:
    """The version respects the governance caps (max chunks, max size)."""
    gov = manifest["governance"]
    violations = list(gov.get("violations", []))
    summary = (
        f"{manifest['total_chunks']} chunks (cap {gov['max_chunks']}), "
        f"{manifest['index_size_mb']} MB (cap {gov['max_size_mb']} MB)"
    )
    return CheckOutcome(not violations, summary, violations, manifest["total_chunks"])


def check_sources_readable(manifest: dict[str, Any]) -> CheckOutcome:
    """Every configured source could be read (an unreadable one keeps its previous chunks)."""
    errors = manifest["changes"].get("unreadable_sources", {})
    failures = [f"{name}: {err}" for name, err in errors.items()]
    summary = "all sources readable" if not failures else f"{len(failures)} source(s) unreadable; previous chunks kept"
    return CheckOutcome(not failures, summary, failures, len(manifest["sources"]))


def check_attention(version_dir: Path) -> CheckOutcome:
    """Every attention row (a chunk without one has score 0) belongs to a chunk of the version and has a finite
    score >= 0, every remembered question (the questions a chunk was confirmed useful for) has a finite weight >= 0
    and belongs to a chunk of the version, and records stay schema-valid."""
    con = connect(version_dir)
    try:
        total = cast(tuple[int], con.execute("SELECT COUNT(*) FROM chunks").fetchone())[0]
        missing, bad = cast(
            tuple[int, int],
            con.execute(
                "SELECT COUNT(*) FILTER (WHERE chunk_id NOT IN (SELECT chunk_id FROM chunks)), "
                "COUNT(*) FILTER (WHERE NOT isfinite(attention_score) OR attention_score < 0) FROM attention"
            ).fetchone(),
        )
        bad_questions = orphan_questions = 0
        held = con.execute("SELECT COUNT(*) FROM duckdb_tables() WHERE table_name = 'attention_questions'").fetchone()
        if cast(tuple[int], held)[0]:
            bad_questions, orphan_questions = cast(
                tuple[int, int],
                con.execute(
                    "SELECT COUNT(*) FILTER (WHERE NOT isfinite(weight) OR weight < 0), "
                    "COUNT(*) FILTER (WHERE chunk_id NOT IN (SELECT chunk_id FROM chunks)) FROM attention_questions"
                ).fetchone(),
            )
    finally:
        con.close()
    failures = []
    if missing:
        failures.append(f"{missing} attention rows belong to chunks this version does not hold")
    if bad:
        failures.append(f"{bad} chunks have a negative or non-finite attention score")
    if bad_questions:
        failures.append(f"{bad_questions} remembered questions have a negative or non-finite weight")
    if orphan_questions:
        failures.append(f"{orphan_questions} remembered questions belong to chunks this version does not hold")
    schema = check_chunks_schema(version_dir)
    failures.extend(schema.failures)
    summary = f"{total - bad} of {total} chunks have a valid attention score; {schema.summary}"
    return CheckOutcome(not failures, summary, failures[:MAX_REPORTED], total)


def check_index_complete(
    version_dir: Path, manifest: dict[str, Any], config: SourcesConfig, base_dir: Path | None
) -> CheckOutcome:
    """The staged version holds exactly its sources' files, and what was carried over kept its rows.

    Cheap at any size (one tree listing per source, aggregates in SQL; no file is read):
    - every file of a source's tree at the indexed commit that the source selects is either indexed (a parent
      row with the same blob) or reported as skipped, and nothing else is;
    - every indexed file has as many chunk rows as its parent row says, and every chunk has its parent;
    - a file whose blob and source configuration are unchanged since the base version has exactly the base
      version's chunk ids (carried rows may not be lost, duplicated or swapped with another file's).
    Sources that could not be read keep the base version's rows: for them only the last rule applies.
    """
    failures: list[str] = []
    con = connect(version_dir)
    try:
        indexed = _indexed_files(con, failures)
        _check_chunk_rows(con, failures)
        carried_checked = _check_carried(con, version_dir, manifest, base_dir, failures)
    finally:
        con.close()
    files_checked = _check_trees(manifest, config, indexed, failures)
    for source in sorted(set(indexed) - {s.name for s in config.sources}):
        failures.append(f"rows of source {source!r}, which the sources file does not name")
    summary = (
        f"{files_checked} files of {len(config.sources)} source(s) checked against their trees; "
        f"{carried_checked} carried-over files keep their base rows; {len(failures)} problem(s)"
    )
    return CheckOutcome(not failures, summary, failures[:MAX_REPORTED], files_checked)


def _indexed_files(con: duckdb.DuckDBPyConnection, failures: list[str]) -> dict[str, dict[str, str]]:
    """source -> path -> blob of every file the version indexed or skipped (a path listed twice is a failure)."""
    indexed: dict[str, dict[str, str]] = defaultdict(dict)
    for source, path, blob in con.execute(
        "SELECT source, path, blob_sha FROM parents UNION ALL SELECT source, path, blob_sha FROM skipped_files"
    ).fetchall():
        if path in indexed[source]:
            failures.append(f"{source}: {path} is both indexed and skipped, or indexed twice")
        indexed[source][path] = blob
    return indexed


def _check_chunk_rows(con: duckdb.DuckDBPyConnection, failures: list[str]) -> None:
    """Every parent has as many chunk rows as it says, every chunk has its parent, and no chunk id appears twice."""
    for source, path, expected, actual in con.execute(
        "SELECT p.source, p.path, p.chunk_count, COUNT(c.chunk_id) FROM parents p "
        "LEFT JOIN chunks c ON c.parent_id = p.parent_id GROUP BY ALL HAVING p.chunk_count <> COUNT(c.chunk_id)"
    ).fetchall():
        failures.append(f"{source}: {path} has {actual} chunk rows, its parent row says {expected}")
    orphans = cast(
        tuple[int],
        con.execute(
            "SELECT COUNT(*) FROM chunks c WHERE c.parent_id NOT IN (SELECT parent_id FROM parents)"
        ).fetchone(),
    )[0]
    if orphans:
        failures.append(f"{orphans} chunk rows have no parent row")
    for table in ("chunks", "attention"):  # no PRIMARY KEY holds ids unique: checked here
        twice = cast(
            tuple[int],
            con.execute(
                f"SELECT COUNT(*) FROM (SELECT chunk_id FROM {table} GROUP BY 1 HAVING COUNT(*) > 1)"
            ).fetchone(),
        )[0]
        if twice:
            failures.append(f"{twice} chunk ids appear more than once in {table}")


def _check_trees(
    manifest: dict[str, Any], config: SourcesConfig, indexed: dict[str, dict[str, str]], failures: list[str]
) -> int:
    """Each readable source's files at its indexed commit are exactly the files indexed from the blobs of that tree;
    returns how many files of the trees were checked."""
    unreadable = set(manifest.get("changes", {}).get("unreadable_sources", {}))
    files_checked = 0
    for src in config.sources:
        entry = manifest["sources"].get(src.name)
        if src.name in unreadable or entry is None:
            continue
        try:
            with GitSource(Path(entry["repo"]), src.name) as repo:
                tree = {e.path: e.blob_sha for e in repo.list_files(entry["head_commit"]) if src.selects(e.path)}
        except SourceError as exc:
            failures.append(str(exc))
            continue
        files_checked += len(tree)
        have = indexed.get(src.name, {})
        for path in sorted(tree.keys() - have.keys()):
            failures.append(f"{src.name}: {path} is in the tree at {entry['head_commit'][:12]} but has no rows")
        for path in sorted(have.keys() - tree.keys()):
            failures.append(f"{src.name}: {path} has rows but is not in the tree at {entry['head_commit'][:12]}")
        for path in sorted(tree.keys() & have.keys()):
            if tree[path] != have[path]:
                failures.append(
                    f"{src.name}: {path} was indexed from blob {have[path][:12]}, the tree has {tree[path][:12]}"
                )
    return files_checked


def _check_carried(
    con: duckdb.DuckDBPyConnection,
    version_dir: Path,
    manifest: dict[str, Any],
    base_dir: Path | None,
    failures: list[str],
) -> int:
    """Files with the same blob and source configuration as in the base must have the base's chunk ids."""
    if base_dir is None or not (base_dir / TABLES).is_file():
        return 0
    base_manifest = json.loads((base_dir / "manifest.json").read_text(encoding="utf-8"))
    same_config = [
        name
        for name, entry in manifest["sources"].items()
        if entry.get("config_fingerprint")
        and entry.get("config_fingerprint") == base_manifest.get("sources", {}).get(name, {}).get("config_fingerprint")
    ]
    if not same_config:
        return 0
    con.execute(f"ATTACH '{base_dir / TABLES}' AS carried_base (READ_ONLY)")
    try:
        placeholders = ", ".join("?" for _ in same_config)
        rows = con.execute(
            f"""
            WITH carried AS (
                SELECT p.source, p.path, p.parent_id FROM parents p
                JOIN carried_base.parents b USING (source, path, blob_sha)
                WHERE p.source IN ({placeholders})
            ),
            mine AS (SELECT parent_id, list_sort(list(chunk_id)) AS ids FROM chunks
                     WHERE parent_id IN (SELECT parent_id FROM carried) GROUP BY 1),
            theirs AS (SELECT parent_id, list_sort(list(chunk_id)) AS ids FROM carried_base.chunks
                       WHERE parent_id IN (SELECT parent_id FROM carried) GROUP BY 1)
            SELECT c.source, c.path, len(COALESCE(m.ids, [])), len(COALESCE(t.ids, [])),
                   COALESCE(m.ids, []) = COALESCE(t.ids, []) AS same
            FROM carried c LEFT JOIN mine m USING (parent_id) LEFT JOIN theirs t USING (parent_id)
            """,
            same_config,
        ).fetchall()
    finally:
        con.execute("DETACH carried_base")
    base_sources = base_manifest.get("sources", {})
    stale = {name: stale_formats(base_sources.get(name)) for name in same_config}
    for source, path, mine, theirs, same in rows:
        if document_format(path) in stale[source]:
            continue  # extracted again by a new extractor (``plan.stale_formats``)
        if not same:
            failures.append(
                f"{source}: {path} is unchanged since the base version but has {mine} chunk rows "
                f"where the base had {theirs} (or other ids)"
            )
    return len(rows)
