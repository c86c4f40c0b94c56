"""The ``local_resources`` registry: load, verify, stage into an index version, resolve.

Rows come from a CSV or JSON file or the Postgres table ``local_resources`` (``schemas/local_resource.schema.json``).
Every row is checked by named rules (``RULES``); a row with an ``error`` issue is left out of the published slice,
one with only ``warning`` / ``info`` issues is published and the issue reported, so bad rows never stop good ones.
A verification run stages a new index version holding three tables (next to what other steps own):

- ``registry``          the published slice: valid, not deprecated rows, normalised
- ``registry_issues``   one row per issue: source_row, local_resource_id, rule, severity, message
- ``registry_history``  every version of every row with ``valid_from`` / ``valid_to`` and the change that opened
                        it (created, updated, verified, deprecated, removed), carried from version to version

``resolve`` answers "which programs serve this ZIP / county" from a version's registry, loaded once per version
into dictionaries keyed by id, ZIP and county.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Literal

import duckdb
import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from livemem.checks import MAX_REPORTED, CheckOutcome
from livemem.config import SourcesConfig
from livemem.duck import registered
from livemem.errors import LivingMemoryError
from livemem.geo.names import COUNTY_WORD, county_key, without_county_word
from livemem.schemas import errors_for, load_schema
from livemem.store import IndexHome, derive_version, iso, utc_now, write_manifest
from livemem.version import connect

LOGIC_VERSION = "registry-v1"  # bump when verification logic changes: the next run re-verifies and re-stages
REGISTRY_TABLES = ("registry", "registry_issues", "registry_history")
FIELDS: tuple[str, ...] = tuple(load_schema("local_resource")["properties"])
RESOURCE_TYPES: tuple[str, ...] = tuple(load_schema("local_resource")["properties"]["resource_type"]["enum"])
VERIFICATION_FIELDS = ("verification_status", "last_verified_at", "verified_by")
CONTENT_FIELDS = tuple(f for f in FIELDS if f not in (*VERIFICATION_FIELDS, "deprecated_at"))
STATUSES = ("verified", "stale", "unverified")
HISTORY_CHANGES = ("created", "updated", "verified", "deprecated", "restored", "removed")
DAY_S = 86_400.0

# rule name -> what it checks (the severity is per issue: error drops the row, warning / info only report)
RULES: dict[str, str] = {
    "schema": "the row is valid per schemas/local_resource.schema.json (required fields, types, vocabulary, dates)",
    "phone": "contact_phone is a well-formed North American number (published as +1XXXXXXXXXX)",
    "email": "contact_email is a well-formed address (domain published in lower case)",
    "url": "url is a well-formed http(s) address (scheme and host published in lower case)",
    "zip_in_state": "zip exists, is in use and lies in the configured state",
    "zip_county": "zip lies in the row's county (ZIP data of the zipcodes package)",
    "zip_coverage": "every zip_coverage ZIP exists and lies in the configured state",
    "freshness": "last_verified_at is not in the future and not older than freshness_days (warning: stale)",
    "duplicate_id": "local_resource_id is used by one row only (later rows are dropped)",
    "duplicate_program": "no other id has the same name, ZIP and resource_type (warning)",
    "deprecated": "rows with deprecated_at in the past leave the published slice (info)",
}

REGISTRY_SQL = """
CREATE TABLE registry (
    local_resource_id VARCHAR PRIMARY KEY, name VARCHAR NOT NULL, description VARCHAR,
    resource_type VARCHAR NOT NULL, county VARCHAR NOT NULL, zip VARCHAR NOT NULL, zip_coverage VARCHAR[] NOT NULL,
    address VARCHAR, contact_phone VARCHAR, contact_email VARCHAR, url VARCHAR, eligibility VARCHAR, hours VARCHAR,
    verification_status VARCHAR NOT NULL, last_verified_at VARCHAR, verified_by VARCHAR, deprecated_at VARCHAR,
    status VARCHAR NOT NULL, source_row INTEGER NOT NULL, content_hash VARCHAR NOT NULL
);
CREATE TABLE registry_issues (
    source_row INTEGER NOT NULL, local_resource_id VARCHAR, rule VARCHAR NOT NULL, severity VARCHAR NOT NULL,
    message VARCHAR NOT NULL
);
"""
HISTORY_SQL = """
CREATE TABLE IF NOT EXISTS registry_history (
    local_resource_id VARCHAR NOT NULL, change VARCHAR NOT NULL, valid_from VARCHAR NOT NULL, valid_to VARCHAR,
    version_id VARCHAR NOT NULL, content_hash VARCHAR, verification_hash VARCHAR, status VARCHAR,
    last_verified_at VARCHAR, deprecated_at VARCHAR, note VARCHAR, data VARCHAR
);
"""
REGISTRY_COLUMNS = (*FIELDS, "status", "source_row", "content_hash")
ISSUE_COLUMNS = ("source_row", "local_resource_id", "rule", "severity", "message")
HISTORY_COLUMNS = (
    "local_resource_id", "change", "valid_from", "valid_to", "version_id", "content_hash", "verification_hash",
    "status", "last_verified_at", "deprecated_at", "note", "data",
)  # fmt: skip

PHONE_EXT = re.compile(r"\s*(?:x|ext\.?|extension)\s*(\d{1,6})\s*$", re.IGNORECASE)
EMAIL = (
    r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    r"@((?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63})$"
)
URL = (
    r"^(?P<scheme>https?)://(?P<host>(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63})"
    r"(?P<port>:\d{1,5})?(?P<rest>[/?#]\S*)?$"
)


class RegistryError(LivingMemoryError):
    """The registry source cannot be read (missing file, unreachable database, not a list of rows)."""


class RegistryQueryError(LivingMemoryError):
    """A resolver hint that cannot be answered (ZIP outside the state, unknown county)."""


# --- configuration -----------------------------------------------------------------------------------------------
class RegistryConfig(BaseModel):
    """The ``registry:`` section of the sources file (``schemas/registry_config.schema.json``), typed."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["csv", "json", "postgres"]
    path: Path | None = None
    table: str = "local_resources"
    dsn_env: str = "RAG_REGISTRY_DSN"
    state: str = "WV"
    freshness_days: int = 180
    max_invalid_share: float = 0.1
    dsn: str | None = Field(default=None, repr=False)  # a secret: never in the sources file, never printed

    @classmethod
    def from_sources(cls, config: SourcesConfig) -> RegistryConfig | None:
        """The section, validated against its schema (errors carry file:line:col), then typed with its path
        resolved against the sources file; None when the file has none."""
        raw = config.section("registry", "registry_config")
        if raw is None:
            return None
        cfg = cls.model_validate(raw)
        if cfg.path is None:
            return cfg
        path = cfg.path.expanduser()
        return cfg.model_copy(update={"path": path if path.is_absolute() else (config.path.parent / path).resolve()})

    def describe(self) -> str:
        if self.kind == "postgres":
            return f"postgres table {self.table} (DSN from ${self.dsn_env})"
        return f"{self.kind} file {self.path}"

    def fingerprint(self) -> str:
        """Changes whenever the same rows would verify differently."""
        payload = [LOGIC_VERSION, self.state, self.freshness_days]
        return hashlib.sha256(json.dumps(payload).encode()).hexdigest()[:16]


# --- loading -----------------------------------------------------------------------------------------------------
@dataclass
class LoadedRows:
    """Rows as read (one object column per schema field, None for absent), with the input's content hash."""

    frame: pd.DataFrame
    source: str
    input_hash: str
    ignored_fields: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.frame)


def load_rows(cfg: RegistryConfig) -> LoadedRows:
    """Read the configured source. Raises RegistryError when it cannot be read at all."""
    if cfg.kind == "postgres":
        return load_postgres(cfg.table, postgres_dsn(cfg))
    assert cfg.path is not None
    return load_csv(cfg.path) if cfg.kind == "csv" else load_json(cfg.path)


def file_hash(path: Path) -> str:
    try:
        return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise RegistryError(f"registry file {path} cannot be read: {exc}") from exc


def load_csv(path: Path) -> LoadedRows:
    digest = file_hash(path)
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[], encoding="utf-8")
    except (UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise RegistryError(f"registry file {path} is not a readable UTF-8 CSV file: {exc}") from exc
    return _loaded(raw, f"csv file {path}", digest)


def load_json(path: Path) -> LoadedRows:
    digest = file_hash(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RegistryError(f"registry file {path} is not valid JSON: {exc}") from exc
    if isinstance(data, dict) and isinstance(data.get("local_resources"), list):
        data = data["local_resources"]
    if not isinstance(data, list):
        raise RegistryError(f"registry file {path}: expected a list of rows or {{'local_resources': [...]}}")
    # A non-object item keeps its place (so row numbers match the file) and fails the schema rule.
    items = [item if isinstance(item, dict) else {"__not_an_object__": type(item).__name__} for item in data]
    return _loaded(pd.DataFrame.from_records(items) if items else pd.DataFrame(), f"json file {path}", digest)


def postgres_dsn(cfg: RegistryConfig) -> str:
    """The DSN given to the resource, else the configured environment variable; empty means libpq's PG* variables
    and defaults."""
    return cfg.dsn or os.environ.get(cfg.dsn_env, "")


def _split_table(table: str) -> tuple[str, ...]:
    return tuple(table.split("."))


def load_postgres(table: str, dsn: str) -> LoadedRows:
    """Read ``table`` (only the schema's columns; others are reported as ignored)."""
    import psycopg
    from psycopg import sql

    ident = sql.Identifier(*_split_table(table))
    try:
        with psycopg.connect(dsn, connect_timeout=10) as conn, conn.cursor() as cur:
            cur.execute(sql.SQL("SELECT * FROM {} LIMIT 0").format(ident))
            present = [d.name for d in cur.description or []]
            wanted = [c for c in FIELDS if c in present]
            checksum = _postgres_checksum(cur, ident)
            cur.execute(
                sql.SQL("SELECT {} FROM {}").format(sql.SQL(", ").join(map(sql.Identifier, wanted)), ident)
                if wanted
                else sql.SQL("SELECT FROM {}").format(ident)
            )
            records = cur.fetchall()
    except psycopg.Error as exc:
        raise RegistryError(f"registry table {table} cannot be read from Postgres: {exc}".strip()) from exc
    # dates and timestamps arrive as Python objects: ISO text, like the files (object columns: no type inference)
    frame = pd.DataFrame(
        {c: pd.Series([_pg_value(r[i]) for r in records], dtype=object) for i, c in enumerate(wanted)},
        index=pd.RangeIndex(len(records)),
    )
    loaded = _loaded(frame, f"postgres table {table}", checksum)
    loaded.ignored_fields = sorted(set(present) - set(FIELDS))
    return loaded


def _postgres_checksum(cur: Any, ident: Any) -> str:
    """Order-independent checksum of the table's rows (the data version of a Postgres registry)."""
    from psycopg import sql

    cur.execute(
        sql.SQL(
            "SELECT count(*), md5(COALESCE(string_agg(h, ',' ORDER BY h), '')) FROM (SELECT md5(t::text) AS h FROM {} t) s"
        ).format(ident)
    )
    count, digest = cur.fetchone()
    return f"pg-md5:{digest}:{count}"


def postgres_checksum(table: str, dsn: str) -> str:
    import psycopg
    from psycopg import sql

    try:
        with psycopg.connect(dsn, connect_timeout=10) as conn, conn.cursor() as cur:
            return _postgres_checksum(cur, sql.Identifier(*_split_table(table)))
    except psycopg.Error as exc:
        raise RegistryError(f"registry table {table} cannot be read from Postgres: {exc}".strip()) from exc


def input_version(cfg: RegistryConfig) -> str:
    """The data version of the configured source without reading its rows: file hash or table checksum."""
    if cfg.kind == "postgres":
        return postgres_checksum(cfg.table, postgres_dsn(cfg))
    assert cfg.path is not None
    return file_hash(cfg.path)


def _pg_value(value: Any) -> Any:
    if value is None or isinstance(value, str | list):
        return value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def _loaded(raw: pd.DataFrame, source: str, digest: str) -> LoadedRows:
    frame = pd.DataFrame(index=pd.RangeIndex(len(raw)))
    for name in FIELDS:
        frame[name] = raw[name].astype(object) if name in raw.columns else None
    frame = frame.astype(object)
    frame = frame.where(frame.notna(), None)
    extra = [c for c in raw.columns if c not in FIELDS and c != "__not_an_object__"]
    if "__not_an_object__" in raw.columns:
        frame["__not_an_object__"] = (
            raw["__not_an_object__"].astype(object).where(raw["__not_an_object__"].notna(), None)
        )
    return LoadedRows(frame=frame, source=source, input_hash=digest, ignored_fields=sorted(map(str, extra)))


# --- ZIP data ----------------------------------------------------------------------------------------------------
@cache
def zip_data() -> dict[str, tuple[str, str, bool]]:
    """ZIP -> (state, county without the word County, in use), from the zipcodes package (loaded once)."""
    import zipcodes

    return {
        z["zip_code"]: (z["state"], without_county_word(z["county"] or ""), bool(z["active"]))
        for z in zipcodes.list_all()
    }


@cache
def _zip_columns() -> tuple[dict[str, str], dict[str, str], dict[str, bool]]:
    """zip_data() as three dicts (state, county, in use) for vectorised lookups."""
    data = zip_data()
    return (
        {z: v[0] for z, v in data.items()},
        {z: v[1] for z, v in data.items()},
        {z: v[2] for z, v in data.items()},
    )


@cache
def state_counties(state: str) -> dict[str, str]:
    """county key -> county name, for the counties of a state."""
    return {county_key(c): c for s, c, _ in zip_data().values() if s == state and c}


# --- verification ------------------------------------------------------------------------------------------------
@dataclass
class Verification:
    """The outcome of verifying every row: rows normalised, what each became, and every issue."""

    rows: pd.DataFrame  # FIELDS normalised + source_row, valid, deprecated, status, content/verification hashes
    issues: pd.DataFrame  # ISSUE_COLUMNS
    checked_at: datetime

    @property
    def published(self) -> pd.DataFrame:
        return self.rows[self.rows["valid"] & ~self.rows["deprecated"]]

    def counts(self) -> dict[str, int]:
        rows = self.rows
        published = rows["valid"] & ~rows["deprecated"]
        by_status = rows.loc[published, "status"].value_counts()
        errors = self.issues[self.issues["severity"] == "error"]
        return {
            "rows_read": len(rows),
            "published": int(published.sum()),
            **{status: int(by_status.get(status, 0)) for status in STATUSES},
            "invalid": int((~rows["valid"]).sum()),
            "deprecated": int((rows["valid"] & rows["deprecated"]).sum()),
            "issues": len(self.issues),
            "error_issues": len(errors),
            "warnings": int((self.issues["severity"] == "warning").sum()),
        }

    def issues_by_rule(self) -> dict[str, dict[str, int]]:
        """rule -> {severity: count} (only rules that found something)."""
        out: dict[str, dict[str, int]] = {}
        for (rule, severity), n in self.issues.groupby(["rule", "severity"]).size().items():
            out.setdefault(str(rule), {})[str(severity)] = int(n)
        return out

    def digest(self) -> str:
        """Changes whenever the verified result (which rows, with which status) changes."""
        h = hashlib.sha256()
        for column in ("content_hash", "verification_hash", "status"):
            h.update("\x1f".join(self.rows[column].astype(str)).encode())
        h.update("".join("1" if v else "0" for v in self.rows["valid"] & ~self.rows["deprecated"]).encode())
        return h.hexdigest()[:32]


class _Issues:
    """Issues found column-wise: each rule adds a mask of rows and their messages."""

    def __init__(self, rows: pd.DataFrame) -> None:
        self.rows = rows
        self.parts: list[pd.DataFrame] = []

    def add(self, rule: str, severity: str, mask: pd.Series, message: pd.Series | str) -> None:
        mask = mask.fillna(False).astype(bool)
        if not mask.any():
            return
        messages = message[mask] if isinstance(message, pd.Series) else pd.Series(message, index=mask[mask].index)
        self.parts.append(
            pd.DataFrame(
                {
                    "source_row": self.rows.loc[mask, "source_row"],
                    "local_resource_id": self.rows.loc[mask, "local_resource_id"],
                    "rule": rule,
                    "severity": severity,
                    "message": messages.astype(str),
                }
            )
        )

    def frame(self) -> pd.DataFrame:
        if not self.parts:
            return pd.DataFrame({c: pd.Series(dtype=object) for c in ISSUE_COLUMNS})
        out = pd.concat(self.parts, ignore_index=True)
        out["local_resource_id"] = out["local_resource_id"].map(lambda v: v if isinstance(v, str) else None)
        return out.sort_values(["source_row", "rule"], kind="stable").reset_index(drop=True)


def _strings(column: pd.Series) -> pd.Series:
    """Only the str values (other types are the schema rule's to report); missing elsewhere."""
    if pd.api.types.infer_dtype(column, skipna=True) in ("string", "empty"):
        return column  # the common case (CSV, Postgres text): no per-value check
    return column.where([isinstance(v, str) for v in column]).astype(object)


def _cut_zip(column: pd.Series) -> pd.Series:
    text = _strings(column).str.strip()
    return text.where(~text.str.fullmatch(r"\d{5}-\d{4}", na=False), text.str[:5])


def _coverage(value: Any) -> Any:
    """zip_coverage as a list of 5-digit strings in input order, without repeats (CSV: split on , ; or spaces)."""
    if value is None:
        return []
    if isinstance(value, str):
        value = value.replace(",", " ").replace(";", " ").replace("|", " ").split()
    if not isinstance(value, list):
        return value  # the schema rule reports it
    items = (
        (v.strip()[:5] if len(v.strip()) == 10 and v.strip()[5] == "-" else v.strip()) if isinstance(v, str) else v
        for v in value
    )
    return list(dict.fromkeys(items))


def _normalise_input(frame: pd.DataFrame) -> pd.DataFrame:
    rows = frame.copy()
    for name in FIELDS:
        if name == "zip_coverage":
            continue
        column = rows[name]
        strings = _strings(column)
        text = strings.str.strip()
        text = text.where(text.notna() & (text != ""), None)
        # non-strings stay as they are, for the schema rule to report
        rows[name] = text if strings is column else column.where(strings.isna(), text)
    rows["zip"] = rows["zip"].where(_cut_zip(rows["zip"]).isna(), _cut_zip(rows["zip"]))
    rows["zip_coverage"] = rows["zip_coverage"].map(_coverage)
    for name in ("resource_type", "verification_status"):
        text = _strings(rows[name])
        rows[name] = rows[name].where(text.isna(), text.str.lower().str.replace(r"[\s-]+", "_", regex=True))
    text = _strings(rows["county"])
    rows["county"] = rows["county"].where(
        text.isna(), text.str.replace(r"\s+", " ", regex=True).str.replace(COUNTY_WORD, "", regex=True)
    )
    rows["source_row"] = np.arange(1, len(rows) + 1)
    return rows


@cache
def _fast_validator():
    """fastjsonschema's compiled validator: about 20 times faster than jsonschema, used to find the few rows
    whose every problem jsonschema then spells out."""
    import fastjsonschema

    return fastjsonschema.compile(load_schema("local_resource"))


def _schema_failures(rows: pd.DataFrame) -> dict[int, str]:
    from fastjsonschema import JsonSchemaException

    fast = _fast_validator()
    failures: dict[int, str] = {}
    columns = [rows[f].tolist() for f in FIELDS]
    extra = rows["__not_an_object__"].tolist() if "__not_an_object__" in rows.columns else None
    for i, values in enumerate(zip(*columns, strict=True)):
        if extra is not None and extra[i] is not None:
            failures[i] = f"(row): expected an object with the registry fields, got {extra[i]}"
            continue
        record = {k: v for k, v in zip(FIELDS, values, strict=True) if v is not None and v != []}
        try:
            fast(record)
        except JsonSchemaException:
            failures[i] = "; ".join(errors_for("local_resource", record))
    return failures


def verify(loaded: LoadedRows, cfg: RegistryConfig, now: datetime | None = None) -> Verification:
    """Check every row against every rule; normalise the fields the rules read."""
    now = (now or utc_now()).astimezone(UTC)
    rows = _normalise_input(loaded.frame)
    issues = _Issues(rows)
    idx = rows.index

    failures = _schema_failures(rows)
    schema_bad = pd.Series(False, index=idx)
    if failures:
        positions = list(failures)
        schema_bad.iloc[positions] = True
        issues.add("schema", "error", schema_bad, pd.Series([failures[p] for p in positions], index=idx[positions]))

    _check_phone(rows, issues)
    _check_email(rows, issues)
    _check_url(rows, issues)
    _check_zips(rows, issues, cfg.state)
    age_days = _check_dates(rows, issues, cfg, now)
    _check_duplicates(rows, issues)

    # deprecated rows leave the slice whatever else is wrong with them (their other issues are not reported)
    deprecated_ts = pd.to_datetime(rows["deprecated_at"], utc=True, errors="coerce", format="ISO8601")
    id_ok = _strings(rows["local_resource_id"]).str.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}", na=False)
    deprecated = (deprecated_ts <= now).fillna(False) & id_ok & ~rows["__dup"]
    table = issues.frame()
    if deprecated.any():
        gone = set(rows.loc[deprecated, "source_row"])
        table = table[~table["source_row"].isin(gone)]
        extra = _Issues(rows)
        when = rows["deprecated_at"].astype(str)
        extra.add("deprecated", "info", deprecated, "deprecated since " + when + ": left out of the published slice")
        table = pd.concat([table, extra.frame()], ignore_index=True).sort_values(["source_row", "rule"])
        table = table.reset_index(drop=True)
    scheduled = (deprecated_ts > now).fillna(False)
    if scheduled.any():
        later = _Issues(rows)
        later.add("deprecated", "info", scheduled, "ends on " + rows["deprecated_at"].astype(str) + ": still published")
        table = pd.concat([table, later.frame()], ignore_index=True).sort_values(["source_row", "rule"])
        table = table.reset_index(drop=True)

    bad_rows = set(table.loc[table["severity"] == "error", "source_row"])
    rows["valid"] = ~rows["source_row"].isin(bad_rows) | deprecated
    rows["deprecated"] = deprecated
    recorded = rows["verification_status"].where(
        rows["verification_status"].notna(),
        np.where(rows["last_verified_at"].notna(), "verified", "unverified"),
    )
    rows["verification_status"] = recorded
    rows["status"] = np.where(
        recorded != "verified",
        "unverified",
        np.where(age_days.isna(), "unverified", np.where(age_days > cfg.freshness_days, "stale", "verified")),
    )
    _hash_rows(rows)
    keep = [*FIELDS, "source_row", "valid", "deprecated", "status", "content_hash", "verification_hash"]
    return Verification(rows=rows[keep], issues=table, checked_at=now)


def _check_phone(rows: pd.DataFrame, issues: _Issues) -> None:
    raw = _strings(rows["contact_phone"])
    present = raw.notna()
    ext = raw.str.extract(PHONE_EXT, expand=False)
    main = raw.str.replace(PHONE_EXT, "", regex=True).str.strip()
    allowed = main.str.fullmatch(r"\+?[\d\s().\-/]+", na=False)
    digits = main.str.replace(r"\D", "", regex=True)
    digits = digits.where(~((digits.str.len() == 11) & digits.str.startswith("1")), digits.str[1:])
    ok = allowed & digits.str.fullmatch(r"[2-9]\d{2}[2-9]\d{6}", na=False)
    issues.add(
        "phone",
        "error",
        present & ~ok,
        "contact_phone " + raw.map(repr, na_action="ignore") + " is not a 10-digit North American number",
    )
    normal = "+1" + digits + ext.map(lambda e: f";ext={e}", na_action="ignore").fillna("")
    rows["contact_phone"] = rows["contact_phone"].where(~(present & ok), normal)


def _check_email(rows: pd.DataFrame, issues: _Issues) -> None:
    raw = _strings(rows["contact_email"])
    text = raw.str.replace(r"^mailto:", "", regex=True, case=False)
    present = raw.notna()
    ok = text.str.fullmatch(EMAIL, na=False) & (text.str.find("@") <= 64)
    issues.add(
        "email", "error", present & ~ok, "contact_email " + raw.map(repr, na_action="ignore") + " is not an address"
    )
    parts = text.str.rsplit("@", n=1)
    normal = parts.str[0] + "@" + parts.str[1].str.lower()
    rows["contact_email"] = rows["contact_email"].where(~(present & ok), normal)


def _check_url(rows: pd.DataFrame, issues: _Issues) -> None:
    raw = _strings(rows["url"])
    present = raw.notna()
    has_scheme = raw.str.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", na=False) & ~raw.str.match(r"^[^/:]+:\d", na=False)
    full = raw.where(has_scheme, "https://" + raw)
    parts = full.str.extract(re.compile(URL, re.IGNORECASE))
    ok = parts["host"].notna()
    issues.add("url", "error", present & ~ok, "url " + raw.map(repr, na_action="ignore") + " is not an http(s) address")
    normal = (
        parts["scheme"].str.lower()
        + "://"
        + parts["host"].str.lower()
        + parts["port"].fillna("")
        + parts["rest"].fillna("")
    )
    rows["url"] = rows["url"].where(~(present & ok), normal)


def _check_zips(rows: pd.DataFrame, issues: _Issues, state: str) -> None:
    data = zip_data()
    states, county_of, in_use = _zip_columns()
    zips = _strings(rows["zip"])
    well_formed = zips.str.fullmatch(r"\d{5}", na=False)  # other values: the schema rule reports them
    zip_state = zips.where(well_formed).map(states)
    known = zip_state.notna()
    zip_county = zips.where(well_formed).map(county_of)
    active = zips.where(well_formed).map(in_use).fillna(False).astype(bool)
    unknown = well_formed & ~known
    issues.add("zip_in_state", "error", unknown, "ZIP " + zips + " does not exist")
    elsewhere = well_formed & known & (zip_state != state)
    issues.add("zip_in_state", "error", elsewhere, "ZIP " + zips + " is in " + zip_state + ", not " + state)
    retired = well_formed & known & (zip_state == state) & ~active
    issues.add("zip_in_state", "error", retired, "ZIP " + zips + " is no longer in use")

    counties = _strings(rows["county"])
    in_state = well_formed & known & (zip_state == state)
    key = counties.str.replace(COUNTY_WORD, "", regex=True).str.casefold()  # county_key, vectorised
    mismatch = in_state & counties.notna() & (key != zip_county.str.casefold())
    issues.add(
        "zip_county",
        "error",
        mismatch,
        "ZIP " + zips + " is in " + zip_county + " County, not " + counties + " County",
    )
    # publish the county as the ZIP data spells it (Fayette, not fayette county)
    names = state_counties(state)
    canonical = key.map(names.get, na_action="ignore")
    rows["county"] = rows["county"].where(canonical.isna(), canonical)

    def bad_coverage(value: Any) -> str | None:
        if not isinstance(value, list):
            return None
        problems = []
        for z in value:
            if not isinstance(z, str) or not re.fullmatch(r"\d{5}", z):
                continue  # schema
            found = data.get(z)
            if found is None:
                problems.append(f"{z} does not exist")
            elif found[0] != state:
                problems.append(f"{z} is in {found[0]}, not {state}")
            elif not found[2]:
                problems.append(f"{z} is no longer in use")
        return "zip_coverage: ZIP " + "; ZIP ".join(problems) if problems else None

    coverage = rows["zip_coverage"].map(bad_coverage)
    issues.add("zip_coverage", "error", coverage.notna(), coverage)


def _check_dates(rows: pd.DataFrame, issues: _Issues, cfg: RegistryConfig, now: datetime) -> pd.Series:
    """Parse the dates (normalised to ISO 8601 UTC), report unreadable, future and stale ones; return the age."""
    ages = pd.Series(np.nan, index=rows.index)
    for name in ("last_verified_at", "deprecated_at"):
        text = _strings(rows[name])
        pattern_ok = text.str.fullmatch(load_schema("local_resource")["properties"][name]["pattern"], na=False)
        parsed = pd.to_datetime(text.where(pattern_ok), utc=True, errors="coerce", format="ISO8601")
        issues.add("schema", "error", pattern_ok & parsed.isna(), name + ": " + text + " is not a valid date")
        rows[name] = rows[name].where(parsed.isna(), parsed.dt.strftime("%Y-%m-%dT%H:%M:%SZ"))
        if name == "last_verified_at":
            ages = (pd.Timestamp(now) - parsed).dt.total_seconds() / DAY_S
            future = ages < -1
            issues.add("freshness", "error", future, "last_verified_at " + text + " is in the future")
            stale = ages > cfg.freshness_days
            message = (
                "last verified "
                + ages.floordiv(1).map(lambda d: f"{int(d)}", na_action="ignore")
                + f" days ago (window {cfg.freshness_days} days): stale"
            )
            issues.add("freshness", "warning", stale, message)
    return ages


def _check_duplicates(rows: pd.DataFrame, issues: _Issues) -> None:
    ids = _strings(rows["local_resource_id"])
    dup = ids.notna() & ids.duplicated(keep="first")
    first_row = rows.assign(_id=ids).groupby("_id")["source_row"].transform("min")
    issues.add(
        "duplicate_id",
        "error",
        dup,
        "local_resource_id " + ids + " is already used by row " + first_row.astype(str) + " (this row is dropped)",
    )
    rows["__dup"] = dup
    name_key = _strings(rows["name"]).str.casefold().str.replace(r"[^0-9a-z]+", "", regex=True)
    key = name_key + "|" + _strings(rows["zip"]) + "|" + _strings(rows["resource_type"])
    candidates = key.notna() & ids.notna() & ~dup
    same = candidates & key.where(candidates).duplicated(keep="first")
    first_id = rows.assign(_k=key.where(candidates), _id=ids).groupby("_k")["_id"].transform("first")
    issues.add(
        "duplicate_program",
        "warning",
        same,
        "same name, ZIP and resource_type as "
        + first_id.map(repr, na_action="ignore")
        + ": possible duplicate listing",
    )


def _hash_rows(rows: pd.DataFrame) -> None:
    def joined(columns: Sequence[str]) -> list[str]:
        values = [
            [",".join(map(str, v)) if isinstance(v, list) else ("" if v is None else str(v)) for v in rows[c].tolist()]
            for c in columns
        ]
        return ["\x1f".join(t) for t in zip(*values, strict=True)]

    for name, columns in (
        ("content_hash", CONTENT_FIELDS),
        ("verification_hash", (*VERIFICATION_FIELDS, "deprecated_at")),
    ):
        rows[name] = [hashlib.blake2b(s.encode(), digest_size=12).hexdigest() for s in joined(columns)]


# --- staging a version -------------------------------------------------------------------------------------------
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


def run_verification(
    cfg: RegistryConfig, home: IndexHome, *, now: datetime | None = None, force: bool = False
) -> RegistryRun:
    """Load, verify and stage a new version with the registry tables; nothing is staged when neither the input,
    the configuration nor the verified result changed since the current version."""
    t0 = time.perf_counter()
    loaded = load_rows(cfg)
    t_load = time.perf_counter()
    result = verify(loaded, cfg, now)
    t_verify = time.perf_counter()
    counts = result.counts()
    by_rule = result.issues_by_rule()
    section = {
        "source": loaded.source,
        "kind": cfg.kind,
        "input_hash": loaded.input_hash,
        "config_fingerprint": cfg.fingerprint(),
        "logic_version": LOGIC_VERSION,
        "result_digest": result.digest(),
        "state": cfg.state,
        "freshness_days": cfg.freshness_days,
        "max_invalid_share": cfg.max_invalid_share,
        "verified_at": iso(result.checked_at),
        **counts,
        "issues_by_rule": by_rule,
        "ignored_fields": loaded.ignored_fields,
    }
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
        now_iso = iso(utc_now())
        from livemem.build import LAYOUT_VERSION

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
        write_manifest(staged, manifest)
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
            from livemem.build import init_chunk_tables

            init_chunk_tables(con)
        con.execute("DROP TABLE IF EXISTS registry; DROP TABLE IF EXISTS registry_issues")
        con.execute(REGISTRY_SQL)
        with registered(con, result.published[list(REGISTRY_COLUMNS)], "registry") as published:
            con.execute(f"INSERT INTO registry SELECT {', '.join(REGISTRY_COLUMNS)} FROM {published}")
        with registered(con, result.issues[list(ISSUE_COLUMNS)], "issues") as issues:
            con.execute(f"INSERT INTO registry_issues SELECT * FROM {issues}")
        con.execute(HISTORY_SQL)
        return _extend_history(con, result, version_id, stamp)
    finally:
        con.close()


def _extend_history(con: duckdb.DuckDBPyConnection, result: Verification, version_id: str, stamp: str) -> dict:
    """Close the open history row of every id that changed and open its new one; tombstone ids that are gone."""
    rows = result.rows
    tracked = rows[rows["valid"]].copy()  # published and deprecated rows
    open_rows = con.execute(
        "SELECT local_resource_id, change AS open_change, status AS open_status, content_hash AS open_content, "
        "verification_hash AS open_verification FROM registry_history WHERE valid_to IS NULL"
    ).df()
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
    opened = merged[merged["change"] != ""]
    live = open_rows[open_rows["open_change"] != "removed"]
    gone_ids = sorted(set(live["local_resource_id"]) - set(tracked["local_resource_id"]))
    failed = rows[~rows["valid"] & rows["local_resource_id"].isin(gone_ids)]
    failing_rules = (
        result.issues[result.issues["source_row"].isin(failed["source_row"]) & (result.issues["severity"] == "error")]
        .groupby("local_resource_id")["rule"]
        .agg(lambda r: ", ".join(sorted(set(r))))
    )
    new_rows = pd.DataFrame(
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
    tombstones = pd.DataFrame(
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


# --- checks on a staged version ----------------------------------------------------------------------------------
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


def check_stale(version_dir: Path, section: dict[str, Any] | None) -> CheckOutcome:
    """WARN: no published row is stale (older than ``freshness_days``)."""
    if not section:
        return CheckOutcome(True, "no registry in this version")
    con = connect(version_dir)
    try:
        stale = con.execute(
            "SELECT local_resource_id, name, last_verified_at FROM registry WHERE status = 'stale' "
            "ORDER BY last_verified_at, local_resource_id"
        ).fetchall()
        total = con.execute("SELECT count(*) FROM registry").fetchone()[0]
    finally:
        con.close()
    failures = [f"{i} ({name}): last verified {when[:10]}" for i, name, when in stale[:MAX_REPORTED]]
    summary = f"{len(stale)} of {total} published rows are stale (verified over {section['freshness_days']} days ago)"
    return CheckOutcome(not stale, summary, failures, checked=total)


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


# --- resolving ---------------------------------------------------------------------------------------------------
@dataclass
class RegistryIndex:
    """A version's published registry in memory, with lookups by id, ZIP (own ZIP or coverage) and county."""

    version_id: str
    state: str
    freshness_days: int
    rows: list[dict[str, Any]]
    verified_day: np.ndarray  # days since the epoch of last_verified_at (NaN when never verified)
    recorded_verified: np.ndarray
    resource_type: np.ndarray
    by_id: dict[str, int]
    by_zip: dict[str, list[int]]
    by_county: dict[str, list[int]]
    ordered: list[int]

    @classmethod
    def from_rows(cls, rows: list[dict[str, Any]], version_id: str, state: str, freshness_days: int) -> RegistryIndex:
        """``rows`` in the order results are listed in within a tier (county, type, name, id)."""
        for row in rows:
            row["zip_coverage"] = list(row["zip_coverage"] or [])
        verified = pd.to_datetime(
            pd.Series([r["last_verified_at"] for r in rows], dtype=object), utc=True, errors="coerce", format="ISO8601"
        )
        days = (verified - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy(dtype=np.float64) / DAY_S
        by_zip: dict[str, list[int]] = {}
        for i, row in enumerate(rows):  # own ZIP first, then coverage (each in row order)
            by_zip.setdefault(row["zip"], []).append(i)
        for i, row in enumerate(rows):
            for z in row["zip_coverage"]:
                if z != row["zip"]:
                    by_zip.setdefault(z, []).append(i)
        by_county: dict[str, list[int]] = {}
        for i, row in enumerate(rows):
            by_county.setdefault(county_key(row["county"]), []).append(i)
        return cls(
            version_id=version_id,
            state=state,
            freshness_days=freshness_days,
            rows=rows,
            verified_day=days,
            recorded_verified=np.array([r["verification_status"] == "verified" for r in rows], dtype=bool),
            resource_type=np.array([r["resource_type"] for r in rows], dtype=object),
            by_id={row["local_resource_id"]: i for i, row in enumerate(rows)},
            by_zip=by_zip,
            by_county=by_county,
            ordered=list(range(len(rows))),
        )

    def status_and_age(self, i: int, today: float) -> tuple[str, int | None]:
        day = self.verified_day[i]
        if day != day:
            return "unverified", None
        age = max(0, int(today - day))
        if not self.recorded_verified[i]:
            return "unverified", age
        return ("stale" if age > self.freshness_days else "verified"), age


@dataclass
class Resolution:
    rows: list[dict[str, Any]]
    county: str | None  # the county searched (given, or the ZIP's)
    total: int


def load_registry_index(version_dir: str | os.PathLike[str]) -> RegistryIndex | None:
    """The registry of a version (None when it has none), loaded once per version directory."""
    return _cached_index(str(Path(version_dir).resolve()))


@lru_cache(maxsize=4)
def _cached_index(version_dir: str) -> RegistryIndex | None:
    path = Path(version_dir)
    manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    section = manifest.get("registry")
    if not section:
        return None
    con = connect(path)
    try:
        found = con.execute(
            f"SELECT {', '.join(FIELDS)} FROM registry ORDER BY county, resource_type, name, local_resource_id"
        ).fetchall()
    finally:
        con.close()
    rows = [dict(zip(FIELDS, r, strict=True)) for r in found]
    return RegistryIndex.from_rows(rows, manifest["version_id"], section["state"], section["freshness_days"])


def resolve(
    source: RegistryIndex | str | os.PathLike[str] | Any,
    *,
    zip: str | None = None,
    county: str | None = None,
    resource_type: str | None = None,
    local_resource_id: str | None = None,
    ids: Iterable[str] = (),
    include_stale: bool = False,
    limit: int | None = None,
    now: datetime | None = None,
) -> Resolution:
    """Programs for the hints, most specific first: ``ids`` (found in retrieval metadata) in their order, then
    programs whose own ZIP or coverage includes ``zip``, then those of ``county`` (default: the ZIP's county).
    ``resource_type`` and ``local_resource_id`` filter; only verified rows unless ``include_stale`` (then stale and
    unverified rows too). With no place hint, every row that passes the filters. ``source`` is a RegistryIndex, a
    version directory or a snapshot (anything with ``.path``)."""
    index = source if isinstance(source, RegistryIndex) else load_registry_index(getattr(source, "path", source))
    if index is None:
        raise RegistryQueryError("this index version holds no registry: materialize registry_verification")
    search_county = None
    if zip is not None:
        found = zip_data().get(zip)
        if found is None:
            raise RegistryQueryError(f"ZIP {zip} does not exist")
        if found[0] != index.state:
            raise RegistryQueryError(f"ZIP {zip} is in {found[0]}; the registry covers {index.state}")
        search_county = found[1]
    if county is not None:
        names = state_counties(index.state)
        key = county_key(county)
        if key not in names:
            close = difflib.get_close_matches(key, list(names), n=3, cutoff=0.6)
            hint = f" (did you mean {', '.join(names[c] for c in close)}?)" if close else ""
            raise RegistryQueryError(f"{county!r} is not a county of {index.state}{hint}")
        search_county = names[key]
    if resource_type is not None and resource_type not in RESOURCE_TYPES:
        raise RegistryQueryError(f"unknown resource_type {resource_type!r}; known: {', '.join(RESOURCE_TYPES)}")

    ids = list(ids)
    tiers: list[tuple[str, Sequence[int]]] = []
    if ids:
        tiers.append(("id", [index.by_id[i] for i in ids if i in index.by_id]))
    if zip is not None:
        tiers.append(("zip", index.by_zip.get(zip, [])))
    if search_county is not None:
        tiers.append(("county", index.by_county.get(county_key(search_county), [])))
    if local_resource_id is not None:
        wanted = index.by_id.get(local_resource_id)
        if wanted is None:
            tiers = []
        elif tiers:  # a filter on the place hints: the row only if they reach it
            tiers = [(match, [i for i in rows if i == wanted]) for match, rows in tiers]
        else:
            tiers = [("id", [wanted])]
    elif not tiers:
        tiers.append(("filter", index.ordered))

    today = (now or utc_now()).timestamp() / DAY_S
    seen: set[int] = set()
    out: list[dict[str, Any]] = []
    total = 0
    for match, candidates in tiers:
        for i in candidates:
            if i in seen or (resource_type is not None and index.resource_type[i] != resource_type):
                continue
            seen.add(i)
            status, age = index.status_and_age(i, today)
            if status != "verified" and not include_stale:
                continue
            total += 1
            if limit is None or len(out) < limit:
                out.append({**index.rows[i], "verification_status": status, "age_days": age, "match": match})
    return Resolution(rows=out, county=search_county, total=total)
