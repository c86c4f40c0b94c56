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
from livemem.extras import require
from livemem.registry.config import RegistryConfig
from livemem.registry.fields import FIELDS, csv_text
from livemem.settings import RegistrySettings


class RegistryError(LivingMemoryError):
    """The registry source cannot be read (missing file, unreachable database, not a list of rows)."""


@dataclass
class LoadedRows:
    """Rows as read (one object column per schema field, None for absent), with the input's content hash."""

    frame: pd.DataFrame
    source: str
    input_hash: str
    ignored_fields: list[str] = field(default_factory=list)
    import_report: dict[str, Any] = field(default_factory=dict)  # kind hsds: the import-fidelity report

    def __len__(self) -> int:
        return len(self.frame)


def load_rows(cfg: RegistryConfig, limits: RegistrySettings | None = None) -> LoadedRows:
    """Read the configured source. Raises RegistryError when it cannot be read at all, or holds more rows (or, a
    file, more bytes) than ``limits`` allow (``RAG_REGISTRY_MAX_ROWS`` / ``RAG_REGISTRY_MAX_BYTES``, passed by the
    entry point; None: their defaults)."""
    limits = limits or RegistrySettings.defaults()
    if cfg.kind == "postgres":
        return load_postgres(cfg.table, postgres_dsn(cfg), max_rows=limits.max_rows)
    assert cfg.path is not None
    if cfg.kind == "hsds":
        return load_hsds(cfg.path, max_rows=limits.max_rows, max_bytes=limits.max_bytes)
    load = load_csv if cfg.kind == "csv" else load_json
    return load(cfg.path, max_rows=limits.max_rows, max_bytes=limits.max_bytes)


def file_hash(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            return "sha256:" + hashlib.file_digest(fh, "sha256").hexdigest()
    except OSError as exc:
        raise RegistryError(f"registry file {path} cannot be read: {exc}") from exc


def _too_many_rows(where: str, max_rows: int) -> RegistryError:
    return RegistryError(
        f"{where} holds more than {max_rows:,} rows, the limit (RAG_REGISTRY_MAX_ROWS): refused before its rows "
        "are held; split the registry, or raise the limit where the machine has the memory (about 5 kB a row)"
    )


def _check_size(path: Path, max_bytes: int | None) -> None:
    """Refuse a file bigger than ``max_bytes`` before reading it."""
    if max_bytes is None:
        return
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise RegistryError(f"registry file {path} cannot be read: {exc}") from exc
    if size > max_bytes:
        raise RegistryError(
            f"registry file {path} is {size:,} bytes, over the limit of {max_bytes:,} (RAG_REGISTRY_MAX_BYTES): "
            "refused before it is read"
        )


def load_csv(path: Path, *, max_rows: int | None = None, max_bytes: int | None = None) -> LoadedRows:
    """The rows of a CSV file (a cell a spreadsheet-safe writer prefixed with ``'`` is read without it:
    ``fields.csv_text``); at most ``max_rows`` of them, from a file of at most ``max_bytes``."""
    _check_size(path, max_bytes)
    digest = file_hash(path)
    try:
        raw = pd.read_csv(
            path, dtype=str, keep_default_na=False, na_values=[], encoding="utf-8",
            nrows=None if max_rows is None else max_rows + 1,
        )  # fmt: skip
    except (UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise RegistryError(f"registry file {path} is not a readable UTF-8 CSV file: {exc}") from exc
    if max_rows is not None and len(raw) > max_rows:
        raise _too_many_rows(f"registry file {path}", max_rows)
    for name in raw.columns:
        column = raw[name]
        quoted = column.str.startswith("'", na=False)
        if quoted.any():
            raw.loc[quoted, name] = column[quoted].map(csv_text)
    return _loaded(raw, f"csv file {path}", digest)


def load_json(path: Path, *, max_rows: int | None = None, max_bytes: int | None = None) -> LoadedRows:
    """The rows of a JSON file (a list, or ``{"local_resources": [...]}``); at most ``max_rows`` of them, from a
    file of at most ``max_bytes``."""
    _check_size(path, max_bytes)
    digest = file_hash(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise RegistryError(f"registry file {path} is not valid JSON: {exc}") from exc
    if isinstance(data, dict) and isinstance(data.get("local_resources"), list):
        data = data["local_resources"]
    if not isinstance(data, list):
        raise RegistryError(f"registry file {path}: expected a list of rows or {{'local_resources': [...]}}")
    if max_rows is not None and len(data) > max_rows:
        raise _too_many_rows(f"registry file {path}", max_rows)
    # A non-object item keeps its place (so row numbers match the file) and fails the schema rule.
    items = [item if isinstance(item, dict) else {"__not_an_object__": type(item).__name__} for item in data]
    return _loaded(pd.DataFrame.from_records(items) if items else pd.DataFrame(), f"json file {path}", digest)


def postgres_dsn(cfg: RegistryConfig) -> str:
    """The DSN given to the resource, else the configured environment variable; empty means libpq's PG* variables
    and defaults."""
    return cfg.dsn or os.environ.get(cfg.dsn_env, "")


def _split_table(table: str) -> tuple[str, ...]:
    return tuple(table.split("."))


def load_postgres(table: str, dsn: str, *, max_rows: int | None = None) -> LoadedRows:
    """Read ``table`` (only the schema's columns; others are reported as ignored); a table of more than
    ``max_rows`` rows is refused before its rows are fetched."""
    psycopg = require("postgres", "psycopg", f"the registry table {table}")
    from psycopg import sql

    ident = sql.Identifier(*_split_table(table))
    try:
        with psycopg.connect(dsn, connect_timeout=10) as conn, conn.cursor() as cur:
            cur.execute(sql.SQL("SELECT * FROM {} LIMIT 0").format(ident))
            present = [d.name for d in cur.description or []]
            wanted = [c for c in FIELDS if c in present]
            checksum = _postgres_checksum(cur, ident)
            if max_rows is not None and int(checksum.rsplit(":", 1)[1]) > max_rows:
                raise _too_many_rows(f"registry table {table}", max_rows)
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
    psycopg = require("postgres", "psycopg", f"the registry table {table}")
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
    return package_hash(cfg.path) if cfg.kind == "hsds" else file_hash(cfg.path)


def package_files(directory: Path) -> list[Path]:
    """The files of an HSDS export directory that import reads: ``datapackage.json`` and every CSV / JSON table."""
    if not directory.is_dir():
        raise RegistryError(f"registry HSDS package {directory} is not a directory")
    return sorted(p for p in directory.iterdir() if p.is_file() and p.suffix.lower() in (".csv", ".json"))


def package_hash(directory: Path) -> str:
    """The data version of an HSDS export directory: a hash of each file's name and content hash."""
    digest = hashlib.sha256()
    for path in package_files(directory):
        digest.update(f"{path.name}\x1f{file_hash(path)}\n".encode())
    return "sha256:" + digest.hexdigest()


def load_hsds(directory: Path, *, max_rows: int | None = None, max_bytes: int | None = None) -> LoadedRows:
    """The registry rows of an Open Referral HSDS export directory (any version: ``hsds_legacy.import_hsds``),
    imported in memory; the import-fidelity report rides along (``LoadedRows.import_report``). A package whose
    files hold more than ``max_bytes`` together, or that gives more than ``max_rows`` rows, is refused."""
    from livemem.registry.hsds import HsdsError
    from livemem.registry.hsds_legacy import import_hsds

    files = package_files(directory)
    if max_bytes is not None:
        size = sum(p.stat().st_size for p in files)
        if size > max_bytes:
            raise RegistryError(
                f"registry HSDS package {directory} is {size:,} bytes, over the limit of {max_bytes:,} "
                "(RAG_REGISTRY_MAX_BYTES): refused before it is read"
            )
    digest = package_hash(directory)
    try:
        result = import_hsds(directory)
    except HsdsError as exc:
        raise RegistryError(f"registry HSDS package {directory} cannot be imported: {exc}") from exc
    if max_rows is not None and len(result.rows) > max_rows:
        raise _too_many_rows(f"registry HSDS package {directory}", max_rows)
    if not result.rows:
        raise RegistryError(f"registry HSDS package {directory}: no service could be imported ({result.summary()})")
    version = result.report.get("version", "?")
    loaded = _loaded(pd.DataFrame.from_records(result.rows), f"hsds package {directory} (HSDS {version})", digest)
    loaded.import_report = result.report
    return loaded


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
