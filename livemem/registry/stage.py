"""Staging a verification run into a new index version: the ``registry``, ``registry_issues`` and
``registry_history`` tables (history carried from version to version, ``valid_from`` / ``valid_to``)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from livemem.dates import iso, utc_now
from livemem.duck import registered
from livemem.registry.config import LOGIC_VERSION, RegistryConfig
from livemem.registry.fields import FIELDS, HISTORY_CHANGES, HISTORY_COLUMNS, ISSUE_COLUMNS, REGISTRY_COLUMNS
from livemem.registry.load import LoadedRows, load_rows
from livemem.registry.verification import Verification, verify
from livemem.settings import RegistrySettings
from livemem.version import connect
from livemem.version.schema import LAYOUT_VERSION, create_sql
from livemem.version.staging import MAX_REPORTED
from livemem.version.store import IndexHome, derive_version, write_manifest

REGISTRY_SQL = create_sql("registry", "registry_issues")  # livemem.version.schema
HISTORY_SQL = create_sql("registry_history")


@dataclass
class RegistryRun:
    """What a verification run did: ``version_id`` is None when nothing was staged (``reason`` says why)."""

    version_id: str | None
    base_version: str | None
    reason: str
    source: str
    counts: dict[str, int] = field(default_factory=dict)
    issues_by_rule: dict[str, dict[str, int]] = field(default_factory=dict)
    history: dict[str, int] = field(default_factory=dict)
    manifest_section: dict[str, Any] = field(default_factory=dict)
    issues_preview: list[dict[str, Any]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def staged(self) -> bool:
        return self.version_id is not None


def _manifest_section(cfg: RegistryConfig, loaded: LoadedRows, result: Verification, counts: dict[str, int],
                      by_rule: dict[str, dict[str, int]]) -> dict[str, Any]:  # fmt: skip
    """The version manifest's ``registry`` section: the input, configuration and logic it rests on, the result's
    digest and counts, issues by rule and the fields flagged or ignored."""
    return {
        "source": loaded.source,
        "kind": cfg.kind,
        "input_hash": loaded.input_hash,
        "config_fingerprint": cfg.fingerprint(),
        "logic_version": LOGIC_VERSION,
        "result_digest": result.digest(),
        "state": cfg.state,
        "states": list(cfg.covered_states),
        "freshness_days": cfg.freshness_days,
        "undated_policy": cfg.undated,
        "invalid_fields": cfg.invalid_fields,
        "max_invalid_share": cfg.max_invalid_share,
        "verified_at": iso(result.checked_at),
        **counts,
        "issues_by_rule": by_rule,
        "flagged_fields": result.flagged_by_field(),
        "ignored_fields": loaded.ignored_fields,
    }


def _version_manifest(cfg: RegistryConfig, base_manifest: dict[str, Any], version_id: str, base: str | None,
                      section: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """The staged version's manifest: the base version's, with this version's ids, times and registry section."""
    now_iso = iso(utc_now())
    manifest = {
        "layout_version": LAYOUT_VERSION,
        "segments": [],
        **base_manifest,
        "version_id": version_id,
        "base_version": base,
        "created_at": base_manifest.get("created_at", now_iso),
        "last_updated": now_iso,
        "registry": section,
    }
    # an index the registry stages first: its home until a build records the sources file's (docs/home.md)
    manifest.setdefault("home", {"states": list(getattr(cfg, "covered_states", None) or (cfg.state,))})
    return manifest


def run_verification(
    cfg: RegistryConfig,
    home: IndexHome,
    *,
    now: datetime | None = None,
    force: bool = False,
    limits: RegistrySettings | None = None,
) -> RegistryRun:
    """Load (within ``limits``: ``load_rows``), verify and stage a new version with the registry tables; nothing is
    staged when neither the input, the configuration nor the verified result changed since the current version."""
    t0 = time.perf_counter()
    loaded = load_rows(cfg, limits)
    t_load = time.perf_counter()
    result = verify(loaded, cfg, now)
    t_verify = time.perf_counter()
    counts = result.counts()
    by_rule = result.issues_by_rule()
    section = _manifest_section(cfg, loaded, result, counts, by_rule)
    preview = result.issues.head(MAX_REPORTED).to_dict("records")
    home.ensure()
    with home.write_lock():
        home.clear_staging()
        base = home.current()
        base_manifest = home.manifest(base) if base else {}
        before = base_manifest.get("registry") or {}
        same = all(before.get(k) == section[k] for k in ("input_hash", "config_fingerprint", "logic_version"))
        if same and before.get("result_digest") == section["result_digest"] and not force:
            return RegistryRun(
                None, base, f"registry unchanged: version {base} already holds this input ({loaded.input_hash[:23]})",
                loaded.source, counts, by_rule, {}, before, preview,
                {"load_s": round(t_load - t0, 3), "verify_s": round(t_verify - t_load, 3)},
            )  # fmt: skip
        version_id, staged, base = derive_version(home)
        stamp = iso(result.checked_at if now is not None else utc_now())
        history = _write_tables(staged, result, version_id, stamp)
        section["history"] = history
        write_manifest(staged, _version_manifest(cfg, base_manifest, version_id, base, section))
    timings = {
        "load_s": round(t_load - t0, 3),
        "verify_s": round(t_verify - t_load, 3),
        "stage_s": round(time.perf_counter() - t_verify, 3),
    }
    return RegistryRun(version_id, base, "staged", loaded.source, counts, by_rule, history, section, preview, timings)


def _write_tables(staged: Path, result: Verification, version_id: str, stamp: str) -> dict[str, int]:
    con = connect(staged, read_only=False)
    try:
        tables = {t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        if "chunks" not in tables:
            # an index that so far holds only the registry: the chunk step later builds on this version
            from livemem.version.staging import init_chunk_tables

            init_chunk_tables(con)
        con.execute("DROP TABLE IF EXISTS registry; DROP TABLE IF EXISTS registry_issues")
        con.execute(REGISTRY_SQL)
        with registered(con, result.published_table(), "registry") as published:
            columns = ", ".join(REGISTRY_COLUMNS)
            con.execute(f"INSERT INTO registry ({columns}) SELECT {columns} FROM {published}")
        with registered(con, result.issues[list(ISSUE_COLUMNS)], "issues") as issues:
            con.execute(f"INSERT INTO registry_issues SELECT * FROM {issues}")
        con.execute(HISTORY_SQL)
        return _extend_history(con, result, version_id, stamp)
    finally:
        con.close()


def _opened(tracked: pd.DataFrame, open_rows: pd.DataFrame) -> pd.DataFrame:
    """The tracked rows whose history opens a new row, with the ``change`` that opens it (created, deprecated,
    restored, updated, verified), against each id's open history row."""
    merged = tracked.merge(open_rows, on="local_resource_id", how="left")
    absent = merged["open_change"].isna() | (merged["open_change"] == "removed")
    # by the open row's status, not its change: a row deprecated when first seen is opened as "created" with
    # status "deprecated", and must not be recorded as newly deprecated on every later run
    newly_deprecated = merged["deprecated"] & (merged["open_status"] != "deprecated")
    restored = ~merged["deprecated"] & (merged["open_status"] == "deprecated")
    change = np.select(
        [absent, newly_deprecated, restored, merged["content_hash"] != merged["open_content"],
         merged["verification_hash"] != merged["open_verification"]],
        ["created", "deprecated", "restored", "updated", "verified"],
        default="",
    )  # fmt: skip
    merged["change"] = change
    return merged[merged["change"] != ""]


def _failing_rules(result: Verification, gone_ids: list[str]) -> pd.Series:
    """id -> the error rules (comma-separated) of the gone ids that are still in the input but failed verification."""
    rows = result.rows
    failed = rows[~rows["valid"] & rows["local_resource_id"].isin(gone_ids)]
    return (
        result.issues[result.issues["source_row"].isin(failed["source_row"]) & (result.issues["severity"] == "error")]
        .groupby("local_resource_id")["rule"]
        .agg(lambda r: ", ".join(sorted(set(r))))
    )


def _history_rows(opened: pd.DataFrame, version_id: str, stamp: str) -> pd.DataFrame:
    """The new open history rows of the opened ids, each with the row's data as JSON."""
    return pd.DataFrame(
        {
            "local_resource_id": opened["local_resource_id"],
            "change": opened["change"],
            "valid_from": stamp,
            "valid_to": None,
            "version_id": version_id,
            "content_hash": opened["content_hash"],
            "verification_hash": opened["verification_hash"],
            "status": np.where(opened["deprecated"], "deprecated", opened["status"]),
            "last_verified_at": opened["last_verified_at"],
            "deprecated_at": opened["deprecated_at"],
            "note": None,
            "data": [json.dumps(r, ensure_ascii=False) for r in opened[list(FIELDS)].to_dict("records")],
        }
    )


def _tombstones(gone_ids: list[str], failing_rules: pd.Series, version_id: str, stamp: str) -> pd.DataFrame:
    """The ``removed`` history rows of the gone ids, noting why (the rules they failed, or absent from the source)."""
    return pd.DataFrame(
        {
            "local_resource_id": gone_ids,
            "change": "removed",
            "valid_from": stamp,
            "valid_to": None,
            "version_id": version_id,
            "content_hash": None,
            "verification_hash": None,
            "status": "removed",
            "last_verified_at": None,
            "deprecated_at": None,
            "note": [
                f"failed verification ({failing_rules[i]})" if i in failing_rules.index else "absent from the source"
                for i in gone_ids
            ],
            "data": None,
        }
    )


def _extend_history(con: duckdb.DuckDBPyConnection, result: Verification, version_id: str, stamp: str) -> dict:
    """Close the open history row of every id that changed and open its new one; tombstone ids that are gone."""
    rows = result.rows
    tracked = rows[rows["valid"]].copy()  # published and deprecated rows
    open_rows = con.execute(
        "SELECT local_resource_id, change AS open_change, status AS open_status, content_hash AS open_content, "
        "verification_hash AS open_verification FROM registry_history WHERE valid_to IS NULL"
    ).df()
    opened = _opened(tracked, open_rows)
    live = open_rows[open_rows["open_change"] != "removed"]
    gone_ids = sorted(set(live["local_resource_id"]) - set(tracked["local_resource_id"]))
    new_rows = _history_rows(opened, version_id, stamp)
    tombstones = _tombstones(gone_ids, _failing_rules(result, gone_ids), version_id, stamp)
    changed = pd.DataFrame({"local_resource_id": [*opened["local_resource_id"], *gone_ids]})
    if len(changed):
        with registered(con, changed, "changed") as changed_ids:
            con.execute(
                "UPDATE registry_history SET valid_to = ? WHERE valid_to IS NULL "
                f"AND local_resource_id IN (SELECT local_resource_id FROM {changed_ids})",
                [stamp],
            )
    for rows_to_add in (new_rows, tombstones):
        if len(rows_to_add):
            with registered(con, rows_to_add, "history") as frame:
                con.execute(f"INSERT INTO registry_history SELECT {', '.join(HISTORY_COLUMNS)} FROM {frame}")
    counts = dict.fromkeys(HISTORY_CHANGES, 0)
    counts.update({str(k): int(v) for k, v in opened["change"].value_counts().items()})
    counts["removed"] = len(gone_ids)
    return counts
