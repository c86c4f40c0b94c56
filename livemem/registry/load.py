"""Reading the registry's rows: a CSV or JSON file or the Postgres table ``local_resources``, with the input's
content hash (what the observable source asset reports)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from livemem.errors import LivingMemoryError
from livemem.registry.config import RegistryConfig
from livemem.registry.fields import FIELDS


class RegistryError(LivingMemoryError):
    """The registry source cannot be read (missing file, unreachable database, not a list of rows)."""


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
