"""The blocking and advisory checks on a staged version's registry (invalid share, staleness, references)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import duckdb

from livemem.version import connect
from livemem.version.staging import MAX_REPORTED, CheckOutcome


def check_invalid_share(section: dict[str, Any] | None) -> CheckOutcome:
    """Blocking: the share of invalid rows is at most ``max_invalid_share`` (and the source had rows)."""
    if not section:
        return CheckOutcome(True, "no registry in this version")
    read, invalid, limit = section["rows_read"], section["invalid"], section["max_invalid_share"]
    if read == 0:
        return CheckOutcome(False, f"the registry source ({section['source']}) has no rows", checked=0)
    share = invalid / read
    summary = f"{invalid} of {read} rows invalid ({share:.1%}; threshold {limit:.1%})"
    failures = [
        f"{rule}: {sev.get('error', 0)} rows" for rule, sev in section["issues_by_rule"].items() if "error" in sev
    ]
    return CheckOutcome(share <= limit, summary, failures if share > limit else [], checked=read)


def undated_advice(section: dict[str, Any] | None) -> str | None:
    """What the operator is told about undated rows (no ``last_verified_at``): how many, what the ``undated`` policy
    does with them, and how to get them verified; None when every published row is dated."""
    undated = (section or {}).get("undated", 0)
    if not section or not isinstance(undated, int) or undated == 0:
        return None
    policy = section.get("undated_policy") or "hidden"
    listed = section.get("as_listed", 0)
    does = {
        "hidden": "unverified and left out of answers and /resources (shown only with include_stale)",
        "unverified_shown": "shown, marked 'listed <listed_at>, not verified since' (or 'not verified')",
        "listed": f"counted as verified as of listed_at ({listed} of them have one; the others stay unverified)",
    }[policy]
    return (
        f"{undated} published rows have no last_verified_at (registry.undated: {policy}): {does}. To have them "
        "verified, record last_verified_at (and verification_status: verified, verified_by) in the source (HSDS: "
        "the service's assured_date / assurer_email), or set registry.undated to unverified_shown (show them, "
        "marked) or listed (verified as of the source's listing date, listed_at) in the sources file."
    )


def check_stale(version_dir: Path, section: dict[str, Any] | None) -> CheckOutcome:
    """WARN: no published row is stale (older than ``freshness_days``), and none is hidden for want of a
    verification date (undated rows under ``undated: hidden``; the summary says how to get them verified)."""
    if not section:
        return CheckOutcome(True, "no registry in this version")
    con = connect(version_dir)
    try:
        stale = con.execute(
            "SELECT local_resource_id, name, last_verified_at FROM registry WHERE status = 'stale' "
            "ORDER BY last_verified_at, local_resource_id"
        ).fetchall()
        total = cast(tuple[int], con.execute("SELECT count(*) FROM registry").fetchone())[0]
    finally:
        con.close()
    failures = [f"{i} ({name}): last verified {(when or '')[:10]}" for i, name, when in stale[:MAX_REPORTED]]
    summary = f"{len(stale)} of {total} published rows are stale (verified over {section['freshness_days']} days ago)"
    advice = undated_advice(section)
    hidden = bool(advice) and (section.get("undated_policy") or "hidden") == "hidden"
    if advice:
        summary += "; " + advice
    return CheckOutcome(not stale and not hidden, summary, failures, checked=total)


def referenced_ids(con: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    """local_resource_id -> where it is referenced (chunk paths, GBIM entity ids), from the version's tables."""
    tables = {t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    refs: dict[str, list[str]] = {}
    if "chunks" in tables:
        for source, path, domain in con.execute(
            "SELECT source, path, domain FROM chunks WHERE domain LIKE '%local_resource_id%'"
        ).fetchall():
            value = json.loads(domain).get("local_resource_id")
            for rid in value if isinstance(value, list) else [value]:
                if rid is not None:
                    refs.setdefault(str(rid), []).append(f"chunk {source}:{path}")
    if "gbim_entities" in tables:
        columns = {c for (c,) in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'gbim_entities'"
        ).fetchall()}  # fmt: skip
        if "local_resource_id" in columns:
            label = "entity_id" if "entity_id" in columns else "rowid"
            for entity, rid in con.execute(
                f"SELECT {label}, local_resource_id FROM gbim_entities WHERE local_resource_id IS NOT NULL"
            ).fetchall():
                refs.setdefault(str(rid), []).append(f"gbim entity {entity}")
    return refs


def check_references(version_dir: Path) -> CheckOutcome:
    """Every local_resource_id in chunk or GBIM entity metadata is a registry id (published or deprecated)."""
    con = connect(version_dir)
    try:
        refs = referenced_ids(con)
        tables = {t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        known: set[str] = set()
        if "registry_history" in tables:
            known = {
                i for (i,) in con.execute(
                    "SELECT local_resource_id FROM registry_history WHERE valid_to IS NULL AND change <> 'removed'"
                ).fetchall()
            }  # fmt: skip
        elif "registry" in tables:
            known = {i for (i,) in con.execute("SELECT local_resource_id FROM registry").fetchall()}
    finally:
        con.close()
    orphans = sorted(set(refs) - known)
    failures = [f"{rid}: referenced by {', '.join(sorted(set(refs[rid]))[:3])}" for rid in orphans[:MAX_REPORTED]]
    summary = (
        f"{len(orphans)} of {len(refs)} referenced local_resource_id values are not in the registry"
        if orphans
        else f"all {len(refs)} referenced local_resource_id values are in the registry"
    )
    return CheckOutcome(not orphans, summary, failures, checked=len(refs))
