"""Personal memory: the append-only log the API writes (SQLite in WAL mode, or a Postgres table).

Part of ``livemem.personal`` (its package docstring says how personal memory works)."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from livemem.extras import require
from livemem.personal.common import LOG_FILE, PERSONAL_TABLE, _event_time
from livemem.usage.traces import POSTGRES_STATEMENT_TIMEOUT_S


class PersonalLog:
    """The SQLite (WAL) log of personal-memory events. The API only appends; ``consolidate`` purges."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOG_FILE
        self._ready = False
        self._lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        if not self._ready or not self.path.exists():
            with self._lock:
                if not self._ready:
                    self._create()
        conn = sqlite3.connect(self.path, timeout=10, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA secure_delete = ON")  # purged memory is overwritten, not left in free pages
        return conn

    def _create(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not self.path.exists():  # personal data: readable by the service's user only
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600))
        conn = sqlite3.connect(self.path, timeout=10, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY AUTOINCREMENT, user TEXT NOT NULL, "
                "kind TEXT NOT NULL, item_id TEXT, created_at TEXT NOT NULL, body TEXT NOT NULL)"
            )
            conn.execute("CREATE INDEX IF NOT EXISTS events_user ON events (user, id)")
        finally:
            conn.close()
        self._ready = True

    def append(
        self, user: str, kind: str, item_id: str | None, body: dict[str, Any], now: datetime | None = None
    ) -> dict[str, Any]:
        created = _event_time(kind, now)
        conn = self._connect()
        try:
            cur = conn.execute(
                "INSERT INTO events (user, kind, item_id, created_at, body) VALUES (?, ?, ?, ?, ?)",
                (user, kind, item_id, created, json.dumps(body, ensure_ascii=False)),
            )
            row_id = cur.lastrowid
        finally:
            conn.close()
        return {"id": row_id, "user": user, "kind": kind, "item_id": item_id, "created_at": created, "body": body}

    def rows(self, *, user: str | None = None, after: int = 0, through: int | None = None) -> list[dict[str, Any]]:
        """Events in log order: one user's or everyone's, with ``after`` < id <= ``through``."""
        if not self.path.exists():
            return []
        sql = "SELECT * FROM events WHERE id > ?"
        args: list[int | str] = [after]
        if user is not None:
            sql, args = sql + " AND user = ?", [*args, user]
        if through is not None:
            sql, args = sql + " AND id <= ?", [*args, through]
        conn = self._connect()
        try:
            found = conn.execute(sql + " ORDER BY id", args).fetchall()
        finally:
            conn.close()
        return [{**dict(r), "body": json.loads(r["body"])} for r in found]

    def users_of(self, scope: str) -> dict[str, tuple[int, int]]:
        """The users of one key's ``scope`` that have log rows: user → (last id of a row that adds memory, last id
        of a tombstone for all of it; 0 for none)."""
        if not self.path.exists():
            return {}
        conn = self._connect()
        try:
            found = conn.execute(_USERS_SQL.format(table="events", owner="user", p="?"), _scope_range(scope))
            return {r[0]: (r[1] or 0, r[2] or 0) for r in found.fetchall()}
        finally:
            conn.close()

    def max_id(self) -> int:
        if not self.path.exists():
            return 0
        conn = self._connect()
        try:
            return int(conn.execute("SELECT coalesce(max(id), 0) FROM events").fetchone()[0])
        finally:
            conn.close()

    def purge(self, ids: Iterable[int]) -> int:
        """Remove rows physically (and checkpoint the WAL, so their bytes leave it too)."""
        ids = sorted(set(ids))
        if not ids:
            return 0
        conn = self._connect()
        try:
            with conn:
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany("DELETE FROM events WHERE id = ?", [(i,) for i in ids])
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
        return len(ids)


class PostgresPersonalLog:
    """The same log as a Postgres table, where the traces go when ``RAG_TRACE_DSN`` is set (replicas on several
    machines). One connection per thread; a purge deletes the rows and vacuums the table."""

    def __init__(self, dsn: str, table: str = PERSONAL_TABLE) -> None:
        if not table.replace("_", "").isalnum():
            raise ValueError(f"personal memory table name {table!r} must be letters, digits and underscores")
        self.dsn = dsn
        self.table = table
        self.statement_timeout_s = POSTGRES_STATEMENT_TIMEOUT_S  # as the traces' table, on the same server
        self._local = threading.local()

    def _execute(self, sql: str, args: Iterable[Any] = (), fetch: bool = True) -> list[dict[str, Any]]:
        psycopg = require("postgres", "psycopg", f"personal memory in the Postgres table {self.table}")
        from psycopg.rows import dict_row

        conn = getattr(self._local, "conn", None)
        try:
            if conn is None or conn.closed:
                conn = psycopg.connect(self.dsn, connect_timeout=5, autocommit=True, row_factory=dict_row)
                # a table locked elsewhere fails the call after this long (the route answers 503), never hangs it
                conn.execute(f"SET statement_timeout = {int(self.statement_timeout_s * 1000)}")
                with conn.transaction(), conn.cursor() as cur:  # serialised: CREATE IF NOT EXISTS races otherwise
                    cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"living-memory:{self.table}"])
                    cur.execute(
                        f"CREATE TABLE IF NOT EXISTS {self.table} (id BIGSERIAL PRIMARY KEY, owner TEXT NOT NULL, "
                        "kind TEXT NOT NULL, item_id TEXT, created_at TEXT NOT NULL, body JSONB NOT NULL)"
                    )
                    cur.execute(f"CREATE INDEX IF NOT EXISTS {self.table}_owner ON {self.table} (owner, id)")
                self._local.conn = conn
            with conn.cursor() as cur:
                cur.execute(sql.format(table=self.table), list(args))
                return cur.fetchall() if fetch else []
        except psycopg.Error:
            self._local.conn = None  # a broken connection is opened again by the next call
            raise

    def append(
        self, user: str, kind: str, item_id: str | None, body: dict[str, Any], now: datetime | None = None
    ) -> dict[str, Any]:
        created = _event_time(kind, now)
        found = self._execute(
            "INSERT INTO {table} (owner, kind, item_id, created_at, body) VALUES (%s, %s, %s, %s, %s) RETURNING id",
            (user, kind, item_id, created, json.dumps(body, ensure_ascii=False)),
        )
        return {"id": found[0]["id"], "user": user, "kind": kind, "item_id": item_id, "created_at": created,
                "body": body}  # fmt: skip

    def rows(self, *, user: str | None = None, after: int = 0, through: int | None = None) -> list[dict[str, Any]]:
        sql = "SELECT id, owner, kind, item_id, created_at, body FROM {table} WHERE id > %s"
        args: list[int | str] = [after]
        if user is not None:
            sql, args = sql + " AND owner = %s", [*args, user]
        if through is not None:
            sql, args = sql + " AND id <= %s", [*args, through]
        return [{**r, "user": r.pop("owner")} for r in self._execute(sql + " ORDER BY id", args)]

    def users_of(self, scope: str) -> dict[str, tuple[int, int]]:
        found = self._execute(_USERS_SQL.format(table="{table}", owner="owner", p="%s"), _scope_range(scope))
        return {r["owner"]: (r["kept"] or 0, r["wiped"] or 0) for r in found}

    def max_id(self) -> int:
        """The last id, once every insert that took a smaller one has committed (ids are drawn before commit, so
        without the lock a consolidation could pass over a row committed late)."""
        self._execute("BEGIN", fetch=False)
        try:
            self._execute("LOCK TABLE {table} IN EXCLUSIVE MODE", fetch=False)
            found = self._execute("SELECT coalesce(max(id), 0) AS m FROM {table}")
        finally:
            self._execute("COMMIT", fetch=False)
        return int(found[0]["m"])

    def purge(self, ids: Iterable[int]) -> int:
        ids = sorted(set(ids))
        if not ids:
            return 0
        self._execute("DELETE FROM {table} WHERE id = ANY(%s)", [ids], fetch=False)
        self._execute("SET statement_timeout = 0", fetch=False)  # the vacuum takes what it takes: purged is gone
        try:
            self._execute("VACUUM {table}", fetch=False)
        finally:
            self._execute(f"SET statement_timeout = {int(self.statement_timeout_s * 1000)}", fetch=False)
        return len(ids)


# a user's rows are ``user = <scope>`` or ``user = <scope>/<user_id>``: a range of the (user, id) index
_USERS_SQL = (
    "SELECT {owner}, max(CASE WHEN kind <> 'delete' THEN id END) AS kept, "
    "max(CASE WHEN kind = 'delete' AND item_id IS NULL THEN id END) AS wiped FROM {table} "
    "WHERE {owner} = {p} OR ({owner} >= {p} AND {owner} < {p}) GROUP BY {owner}"
)


def _scope_range(scope: str) -> tuple[str, str, str]:
    return scope, scope + "/", scope + "0"  # "0" is the character after "/"


_LOGS: dict[tuple[str, str | None], PersonalLog | PostgresPersonalLog] = {}


def log_for(directory: str | os.PathLike[str], dsn: str | None = None) -> PersonalLog | PostgresPersonalLog:
    """The log of the store at ``directory``: the Postgres table at ``dsn`` when given (the traces' database,
    ``RAG_TRACE_DSN``, which the entry point passes down), else ``log.sqlite`` there. One object per process and
    store (its schema is checked once, not per request)."""
    key = (str(directory), dsn)
    found = _LOGS.get(key)
    if found is None:
        found = _LOGS.setdefault(key, PostgresPersonalLog(dsn) if dsn else PersonalLog(directory))
    return found
