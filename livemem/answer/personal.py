"""Personal episodic memory: each user's memory cards, past exchanges and feedback, beside the corpus.

Serving never writes the index, and personal memory is not in it. It has a store of its own under
``LIVEMEM_PERSONAL_DIR`` (default ``<index home>/personal``), in two parts:

- ``log.sqlite`` (WAL): an append-only log the API writes, one row per event of one user: ``card`` (a memory card
  the user posted), ``exchange`` (a /context or /chat call the user asked to remember), ``feedback`` (a chunk judged
  useful or not) and ``delete`` (a tombstone: all of the user's memory, or one card). Reads honour a tombstone at
  once; the rows it covers are removed physically at the next consolidation.
- ``snapshots/<day>-<n>.npz`` named by ``CURRENT``: what the daily ``personal_memory`` asset consolidated
  (``consolidate``: tombstones applied, expired rows dropped, duplicates merged, cards and exchanges embedded with
  the project's embedder). A snapshot is written to a temporary file, renamed, then ``CURRENT`` is replaced, so a
  reader never sees a half-written one; older snapshots are deleted (they may hold deleted memory).

A request reads the user's part of the current snapshot plus the user's log rows after it (``PersonalView``,
built by ``read_view``). A user is the hash of the caller's API key, or that hash with an explicit ``user_id``
inside it (``user_key``): another key can never name it. Which memory a user may read is decided by that key only.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from cachetools import LRUCache

from livemem.settings import PersonalSettings, TraceSettings
from livemem.usage.traces import POSTGRES_STATEMENT_TIMEOUT_S

PERSONAL_DIR_ENV = "LIVEMEM_PERSONAL_DIR"
RETENTION_ENV = "LIVEMEM_PERSONAL_RETENTION_DAYS"
DEFAULT_RETENTION_DAYS = 365
LOG_FILE = "log.sqlite"
PERSONAL_TABLE = "living_memory_personal"
TRACE_DSN_ENV = "RAG_TRACE_DSN"
SNAPSHOTS = "snapshots"
CURRENT = "CURRENT"
KINDS = ("card", "exchange", "feedback", "delete")
# Feedback nudges a chunk's score for its user only, by NUDGE_STEP per net vote, at most NUDGE_VOTES votes either
# way: a factor in [0.5, 1.5]. NUDGE_POOL more corpus candidates are ranked so a boosted chunk can move in.
NUDGE_STEP = 0.25
NUDGE_VOTES = 2
NUDGE_POOL = 5
EXCHANGE_ANSWER_CHARS = 600
MAX_ITEMS = 2000  # cards and exchanges one user may hold: bounds what one request reads and embeds


def _event_time(kind: str, now: datetime | None) -> str:
    """When an event of ``kind`` is appended (ISO); an unknown kind is refused by every store alike."""
    if kind not in KINDS:
        raise ValueError(f"unknown personal memory event {kind!r}")
    return iso(now or utc_now())


class MemoryFull(Exception):
    """The user already holds ``MAX_ITEMS`` cards and exchanges."""


class TooManyUsers(Exception):
    """The API key already keeps memory for ``LIVEMEM_PERSONAL_MAX_USERS_PER_KEY`` users, and this is a new one."""


def personal_dir_from_env(index_dir: str | os.PathLike[str]) -> Path:
    """Where personal memory lives: ``LIVEMEM_PERSONAL_DIR``, else ``<index home>/personal`` (serving and the
    asset resolve it with this one function)."""
    return PersonalSettings.from_env().directory(index_dir)


def retention_days_from_env() -> int:
    """How long personal memory is kept: ``LIVEMEM_PERSONAL_RETENTION_DAYS`` (default 365)."""
    return PersonalSettings.from_env().retention_days


def max_users_from_env() -> int:
    """How many users one API key may keep memory for: ``LIVEMEM_PERSONAL_MAX_USERS_PER_KEY`` (default 1000)."""
    return PersonalSettings.from_env().max_users_per_key


def user_key(scope: str, user_id: str | None) -> str:
    """The user: the caller's key scope (``livemem.answer.conversation.caller_scope``), or a ``user_id`` inside it."""
    return f"{scope}/{user_id}" if user_id else scope


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def nudge_factor(votes: int) -> float:
    """The score factor of a chunk a user judged: net useful votes, bounded (docs/personal-memory.md)."""
    return 1.0 + NUDGE_STEP * max(-NUDGE_VOTES, min(NUDGE_VOTES, votes))


def normalized_text(text: str) -> str:
    return " ".join(text.lower().split())


# --- the append-only log ------------------------------------------------------------------------------------------
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
        sql, args = "SELECT * FROM events WHERE id > ?", [after]
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
        import psycopg
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
        sql, args = "SELECT id, owner, kind, item_id, created_at, body FROM {table} WHERE id > %s", [after]
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


def log_for(directory: str | os.PathLike[str]) -> PersonalLog | PostgresPersonalLog:
    """The log of the store at ``directory``: the Postgres table when ``RAG_TRACE_DSN`` is set (as the traces
    choose), else ``log.sqlite`` there. One object per process (its schema is checked once, not per request)."""
    dsn = TraceSettings.from_env().dsn
    key = (str(directory), dsn)
    found = _LOGS.get(key)
    if found is None:
        found = _LOGS.setdefault(key, PostgresPersonalLog(dsn) if dsn else PersonalLog(directory))
    return found


# --- consolidated snapshots -----------------------------------------------------------------------------------------
@dataclass
class MemorySnapshot:
    """One consolidated snapshot: items (cards and exchanges) with their vectors, and feedback votes."""

    snapshot_id: str
    through_id: int
    created_at: str
    model_id: str
    items: list[dict[str, Any]]
    vectors: np.ndarray
    feedback: list[dict[str, Any]]
    by_user: dict[str, list[int]] = field(default_factory=dict)  # user → rows of ``items`` (built on load)
    votes_by_user: dict[str, dict[str, int]] = field(default_factory=dict)  # user → chunk → net votes

    def __post_init__(self) -> None:
        for i, item in enumerate(self.items):
            self.by_user.setdefault(item["user"], []).append(i)
        for vote in self.feedback:
            self.votes_by_user.setdefault(vote["user"], {})[vote["chunk_id"]] = vote["votes"]


def current_snapshot_id(directory: Path) -> str | None:
    try:
        return (directory / CURRENT).read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None


def load_snapshot(directory: Path, snapshot_id: str) -> MemorySnapshot:
    with np.load(directory / SNAPSHOTS / f"{snapshot_id}.npz", allow_pickle=False) as data:
        meta = json.loads(str(data["meta"]))
        vectors = np.asarray(data["vectors"], dtype=np.float32)
    return MemorySnapshot(
        snapshot_id, meta["through_id"], meta["created_at"], meta["model_id"], meta["items"], vectors,
        meta["feedback"],
    )  # fmt: skip


def write_snapshot(directory: Path, snapshot: MemorySnapshot) -> Path:
    """Write the snapshot file (temp + rename), then switch ``CURRENT`` (temp + rename), then delete the older
    snapshots: they may hold memory that was deleted since."""
    folder = directory / SNAPSHOTS
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    meta = {
        "through_id": snapshot.through_id,
        "created_at": snapshot.created_at,
        "model_id": snapshot.model_id,
        "items": snapshot.items,
        "feedback": snapshot.feedback,
    }
    target = folder / f"{snapshot.snapshot_id}.npz"
    tmp = folder / f".{snapshot.snapshot_id}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        np.savez(out, vectors=snapshot.vectors, meta=np.array(json.dumps(meta, ensure_ascii=False)))
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, target)
    pointer = directory / f".{CURRENT}.{secrets.token_hex(4)}.tmp"
    pointer.write_text(snapshot.snapshot_id + "\n", encoding="utf-8")
    os.replace(pointer, directory / CURRENT)
    for old in [*folder.glob("*.npz"), *folder.glob(".*.tmp")]:  # consolidations are serialised: all stale
        if old != target:
            old.unlink(missing_ok=True)
    return target


_SNAPSHOTS: dict[str, MemorySnapshot] = {}
_SNAPSHOTS_LOCK = threading.Lock()


def cached_snapshot(directory: Path) -> MemorySnapshot | None:
    """The current snapshot, loaded once per process per snapshot id."""
    key = str(directory)
    for attempt in range(3):
        snapshot_id = current_snapshot_id(directory)
        if snapshot_id is None:
            return None
        found = _SNAPSHOTS.get(key)
        if found is not None and found.snapshot_id == snapshot_id:
            return found
        try:
            found = load_snapshot(directory, snapshot_id)
        except FileNotFoundError:  # a consolidation switched CURRENT and removed this one since: read it again
            if attempt == 2:
                raise
            continue
        with _SNAPSHOTS_LOCK:
            _SNAPSHOTS[key] = found
        return found
    return None


# --- what one request sees -------------------------------------------------------------------------------------------
_VECTORS: LRUCache = LRUCache(maxsize=4096)  # pending items' vectors, by (model id, text hash)
_VECTORS_LOCK = threading.Lock()


def item_text(kind: str, body: dict[str, Any]) -> str:
    """What is embedded and shown: a card's text; an exchange's question (and the start of its answer)."""
    if kind == "card":
        return body["text"]
    answer = body.get("answer")
    shown = f"You asked: {body['message']}"
    return f"{shown}\nAnswer: {answer[:EXCHANGE_ANSWER_CHARS]}" if answer else shown


@dataclass
class PersonalView:
    """One user's memory as one request sees it: consolidated items not deleted since, pending items, the votes.

    ``share`` is the ``mix``: the part of ``top_k`` given to personal memory (0: none)."""

    user: str
    user_id: str | None
    share: float
    remember: bool
    items: list[dict[str, Any]]
    vectors: np.ndarray | None
    votes: dict[str, int]
    snapshot_id: str | None
    pending: int

    def nudges(self) -> dict[str, float]:
        return {c: nudge_factor(v) for c, v in self.votes.items() if v}

    def search(self, vector: np.ndarray, top_k: int, min_cosine: float) -> list[dict[str, Any]]:
        """Up to ``share`` × ``top_k`` items (at least one when ``share`` > 0) as similar as ``min_cosine``."""
        k = min(top_k, max(1, round(top_k * self.share))) if self.share > 0 else 0
        if not k or self.vectors is None or not len(self.items):
            return []
        scores = self.vectors @ vector
        out = []
        for i in np.argsort(-scores)[:k]:
            if scores[i] < min_cosine:
                break
            item = self.items[int(i)]
            out.append({
                "memory_id": item["item_id"], "kind": item["kind"], "content": item["text"],
                "created_at": item["created_at"], "score": round(float(scores[i]), 6), "personal": True,
                "provenance": {"store": "personal", "memory_id": item["item_id"], "kind": item["kind"],
                               "created_at": item["created_at"], "state": item["state"]},
            })  # fmt: skip
        return out

    def corpus_pool(self, corpus_k: int) -> int:
        """Corpus candidates to rank: a few more when this user's votes may move some in or out."""
        return corpus_k + (NUDGE_POOL if self.votes else 0) if corpus_k else 0

    def nudge(self, found: list[dict[str, Any]], counties: list[str], corpus_k: int) -> list[dict[str, Any]]:
        """Corpus results with this user's factors applied, re-ranked (the counties' own passages still first) and
        cut to ``corpus_k``."""
        factors = self.nudges()
        if not factors:
            return found[:corpus_k]
        out = []
        for result in found:
            factor = factors.get(result["chunk_id"], 1.0)
            if factor != 1.0:
                # a nudge is a boost like attention: it reorders, never moves the normalised (relevance) scale
                result = {**result, "score": result["score"] * factor}
            out.append(result)
        wanted = set(counties)
        out.sort(key=lambda r: (not (wanted and r["metadata"].get("county") in wanted), -r["score"]))
        return out[:corpus_k]

    def route(self, personal: list[dict[str, Any]], corpus: list[dict[str, Any]]) -> dict[str, Any]:
        """``route.personal``: the split, and the nudges that applied to this answer's passages."""
        factors = self.nudges()
        return {
            "user_id": self.user_id,
            "mix": self.share,
            "personal_passages": len(personal),
            "corpus_passages": len(corpus),
            "nudged": [
                {"chunk_id": p["chunk_id"], "factor": factors[p["chunk_id"]]}
                for p in corpus
                if p["chunk_id"] in factors
            ],
            "snapshot": self.snapshot_id,
            "pending": self.pending,
            "remembered": self.remember,
        }


def read_view(
    directory: Path,
    user: str,
    *,
    user_id: str | None = None,
    share: float = 0.0,
    remember: bool = False,
    retention_days: int = DEFAULT_RETENTION_DAYS,
    encode: Callable[[list[str]], np.ndarray] | None = None,
    model_id: str = "",
    now: datetime | None = None,
) -> PersonalView:
    """The user's memory now: the current snapshot's items minus those deleted since, plus the user's log rows after
    it (cards and exchanges; tombstones; votes), minus what is past retention. Pending items are embedded with
    ``encode`` (when given and ``share`` > 0), once per text per process."""
    log = log_for(directory)
    for _ in range(3):  # a consolidation may switch CURRENT (and purge rows) between the two reads: read again
        snapshot = cached_snapshot(directory)
        through = snapshot.through_id if snapshot else 0
        tail = log.rows(user=user, after=through)
        if current_snapshot_id(directory) == (snapshot.snapshot_id if snapshot else None):
            break
    cutoff = iso((now or utc_now()) - timedelta(days=retention_days))
    items: dict[str, dict[str, Any]] = {}
    vectors: dict[str, np.ndarray] = {}
    votes: dict[str, int] = {}
    if snapshot is not None:
        same_model = not model_id or snapshot.model_id == model_id  # else its items are embedded again, here
        for i in snapshot.by_user.get(user, []):
            item = snapshot.items[i]
            items[item["item_id"]] = {**item, "state": "consolidated"}
            if same_model:
                vectors[item["item_id"]] = snapshot.vectors[i]
        votes = dict(snapshot.votes_by_user.get(user, {}))
    for row in tail:
        if row["kind"] == "delete":
            if row["item_id"] is None:
                items, vectors, votes = {}, {}, {}
            else:
                items.pop(row["item_id"], None)
        elif row["kind"] == "feedback":
            votes[row["item_id"]] = votes.get(row["item_id"], 0) + (1 if row["body"]["useful"] else -1)
        else:
            items[row["item_id"]] = {
                "user": user, "kind": row["kind"], "item_id": row["item_id"], "created_at": row["created_at"],
                "text": item_text(row["kind"], row["body"]), "log_id": row["id"], "state": "pending",
            }  # fmt: skip
    kept = [item for item in items.values() if item["created_at"] >= cutoff]
    matrix = None
    if share > 0 and kept:
        missing = [item["text"] for item in kept if item["item_id"] not in vectors]
        if missing and encode is not None:
            vectors.update(zip(
                [i["item_id"] for i in kept if i["item_id"] not in vectors], encoded(missing, encode, model_id),
                strict=True,
            ))  # fmt: skip
        kept = [item for item in kept if item["item_id"] in vectors]
        matrix = np.stack([vectors[item["item_id"]] for item in kept]) if kept else None
    pending = sum(1 for item in kept if item["state"] == "pending")
    snapshot_id = snapshot.snapshot_id if snapshot else None
    return PersonalView(user, user_id, share, remember, kept, matrix, votes, snapshot_id, pending)


def encoded(texts: list[str], encode: Callable[[list[str]], np.ndarray], model_id: str) -> list[np.ndarray]:
    keys = [(model_id, hashlib.sha256(t.encode("utf-8")).hexdigest()) for t in texts]
    with _VECTORS_LOCK:
        found = {k: _VECTORS.get(k) for k in keys}
    todo = [t for t, k in zip(texts, keys, strict=True) if found[k] is None]
    if todo:
        fresh = encode(todo)
        with _VECTORS_LOCK:
            for t, v in zip(todo, fresh, strict=True):
                key = (model_id, hashlib.sha256(t.encode("utf-8")).hexdigest())
                _VECTORS[key] = found[key] = np.asarray(v, dtype=np.float32)
    return [found[k] for k in keys]


# --- writes from the API ----------------------------------------------------------------------------------------------
def users_holding(directory: Path, scope: str) -> set[str]:
    """The users of the key ``scope`` (its own, and each ``user_id`` within it) whose memory holds something now: a
    row after their last delete-all in the log, or a part of the current snapshot no delete-all has covered since."""
    rows = log_for(directory).users_of(scope)
    snapshot = cached_snapshot(directory)
    through = snapshot.through_id if snapshot else 0
    consolidated = set(snapshot.by_user) | set(snapshot.votes_by_user) if snapshot else set()
    mine = {u for u in consolidated if u == scope or u.startswith(scope + "/")}
    holding = {u for u, (kept, wiped) in rows.items() if kept > wiped}
    return holding | {u for u in mine if rows.get(u, (0, 0))[1] <= through}


def admit_user(directory: Path, user: str, max_users: int | None = None) -> None:
    """``TooManyUsers`` when ``user`` would be a new user of its key (holding nothing yet) and the key already
    keeps memory for ``max_users`` (default ``LIVEMEM_PERSONAL_MAX_USERS_PER_KEY``). A user whose memory was
    deleted whole frees its place at once."""
    limit = max_users_from_env() if max_users is None else max_users
    scope = user.split("/", 1)[0]
    holding = users_holding(directory, scope)
    if user not in holding and len(holding) >= limit:
        raise TooManyUsers(
            f"this API key keeps personal memory for {len(holding)} users, the most it may "
            f"(LIVEMEM_PERSONAL_MAX_USERS_PER_KEY): delete one (DELETE /memory?user_id=...) or use an existing user_id"
        )


def add_card(
    directory: Path, user: str, text: str, now: datetime | None = None, max_users: int | None = None
) -> dict[str, Any]:
    """Append a memory card, or return the user's identical visible card (same words, any case and spacing).
    ``MemoryFull`` when the user already holds ``MAX_ITEMS``; ``TooManyUsers`` when the user is new and its key
    already has the most users it may (``admit_user``)."""
    view = read_view(directory, user)
    same = normalized_text(text)
    for item in view.items:
        if item["kind"] == "card" and normalized_text(item["text"]) == same:
            return {"memory_id": item["item_id"], "created_at": item["created_at"], "duplicate": True}
    if len(view.items) >= MAX_ITEMS:
        raise MemoryFull(f"this memory holds {len(view.items)} items, the most it may: delete some first")
    if not view.items and not view.votes:
        admit_user(directory, user, max_users)
    row = log_for(directory).append(user, "card", str(uuid.uuid4()), {"text": text}, now)
    return {"memory_id": row["item_id"], "created_at": row["created_at"], "duplicate": False}


def add_exchange(
    directory: Path, user: str, message: str, answer: str | None, chunk_ids: list[str], endpoint: str
) -> dict[str, Any] | None:
    """Append a remembered exchange (None, and nothing written, when the user's memory is full or the user would
    be one too many for its key)."""
    view = read_view(directory, user)
    if len(view.items) >= MAX_ITEMS:
        return None
    if not view.items and not view.votes:
        try:
            admit_user(directory, user)
        except TooManyUsers:
            return None
    body = {"message": message, "answer": answer, "chunk_ids": chunk_ids[:20], "endpoint": endpoint}
    row = log_for(directory).append(user, "exchange", str(uuid.uuid4()), body)
    return {"memory_id": row["item_id"], "created_at": row["created_at"]}


def add_feedback(directory: Path, user: str, chunk_ids: list[str], useful: bool, max_users: int | None = None) -> int:
    """A vote per chunk (``TooManyUsers`` when the user is new and its key has the most users it may)."""
    view = read_view(directory, user)
    if not view.items and not view.votes:
        admit_user(directory, user, max_users)
    log = log_for(directory)
    for chunk_id in chunk_ids:
        log.append(user, "feedback", chunk_id, {"useful": useful})
    return len(chunk_ids)


def delete(directory: Path, user: str, memory_id: str | None = None) -> dict[str, Any]:
    """A tombstone: everything of the user (``memory_id`` None) or one item. Reads honour it at once."""
    row = log_for(directory).append(user, "delete", memory_id, {})
    return {"deleted": memory_id or "all", "at": row["created_at"]}


# --- consolidation (the daily asset) ----------------------------------------------------------------------------------
@dataclass
class Consolidation:
    snapshot_id: str
    through_id: int
    users: int
    items: int
    embedded: int
    reused_vectors: int
    feedback: int
    purged: dict[str, int]
    timings_s: dict[str, float]


def consolidate(
    directory: str | os.PathLike[str],
    encode: Callable[[list[str]], np.ndarray],
    model_id: str,
    retention_days: int = DEFAULT_RETENTION_DAYS,
    now: datetime | None = None,
) -> Consolidation:
    """Every log row so far → one new snapshot; then the rows that tombstones cover, expired rows, duplicates and
    applied tombstones are purged from the log. Vectors of texts the previous snapshot has (same model) are reused;
    the others are embedded with ``encode``. Running it again with no new rows gives the same items."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(directory / ".consolidate.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one at a time: each deletes every snapshot but its own
        return _consolidate(directory, encode, model_id, retention_days, now or utc_now())


def _consolidate(
    directory: Path, encode: Callable[[list[str]], np.ndarray], model_id: str, retention_days: int, now: datetime
) -> Consolidation:
    started = time.perf_counter()
    log = log_for(directory)
    cutoff = iso(now - timedelta(days=retention_days))
    through = log.max_id()
    rows = log.rows(through=through)
    purge: dict[str, set[int]] = {"deleted": set(), "expired": set(), "duplicates": set(), "tombstones": set()}
    items: dict[tuple[str, str], dict[str, Any]] = {}
    seen_text: dict[tuple[str, str, str], str] = {}
    feedback_rows: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        user = row["user"]
        if row["kind"] == "delete":
            purge["tombstones"].add(row["id"])
            covered = [k for k in items if k[0] == user and (row["item_id"] is None or k[1] == row["item_id"])]
            for k in covered:
                purge["deleted"].add(items.pop(k)["log_id"])
            seen_text = {k: v for k, v in seen_text.items() if (k[0], v) in items}
            if row["item_id"] is None:
                purge["deleted"].update(r["id"] for r in feedback_rows.pop(user, []))
        elif row["created_at"] < cutoff:
            purge["expired"].add(row["id"])
        elif row["kind"] == "feedback":
            feedback_rows.setdefault(user, []).append(row)
        else:
            text = item_text(row["kind"], row["body"])
            same = (user, row["kind"], normalized_text(text))
            if same in seen_text:
                purge["duplicates"].add(row["id"])
                continue
            seen_text[same] = row["item_id"]
            items[(user, row["item_id"])] = {
                "user": user, "kind": row["kind"], "item_id": row["item_id"], "created_at": row["created_at"],
                "text": text, "log_id": row["id"],
            }  # fmt: skip
    previous = cached_snapshot(directory)
    known: dict[str, np.ndarray] = {}
    if previous is not None and previous.model_id == model_id:
        known = {item_hash(i["text"]): previous.vectors[n] for n, i in enumerate(previous.items)}
    ordered = sorted(items.values(), key=lambda i: i["log_id"])
    todo = [i["text"] for i in ordered if item_hash(i["text"]) not in known]
    t = time.perf_counter()
    fresh = encode(todo) if todo else np.zeros((0, 0), dtype=np.float32)
    known.update(zip((item_hash(x) for x in todo), fresh, strict=True))
    embed_s = time.perf_counter() - t
    dim = next(iter(known.values())).shape[0] if known else 0
    vectors = (
        np.stack([known[item_hash(i["text"])] for i in ordered]).astype(np.float32)
        if ordered
        else np.zeros((0, dim), dtype=np.float32)
    )
    feedback = []
    for user, judged in sorted(feedback_rows.items()):
        totals: dict[str, int] = {}
        for row in judged:
            totals[row["item_id"]] = totals.get(row["item_id"], 0) + (1 if row["body"]["useful"] else -1)
        feedback.extend({"user": user, "chunk_id": c, "votes": v} for c, v in sorted(totals.items()) if v)
    snapshot = MemorySnapshot(
        f"{now:%Y-%m-%d}-{through:08d}-{secrets.token_hex(3)}", through, iso(now), model_id, ordered, vectors,
        feedback,
    )  # fmt: skip
    write_snapshot(directory, snapshot)
    purged = {name: log.purge(ids) for name, ids in purge.items()}
    return Consolidation(
        snapshot.snapshot_id, through, len({i["user"] for i in ordered} | {f["user"] for f in feedback}),
        len(ordered), len(todo), len(ordered) - len(todo), len(feedback), purged,
        {"embed": round(embed_s, 3), "total": round(time.perf_counter() - started, 3)},
    )  # fmt: skip


def item_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
