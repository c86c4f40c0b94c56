"""Usage traces: append-only JSONL files the nightly attention rollup reads.

Each serving process appends to ``<index home>/traces/YYYY-MM-DD-<host>-<pid>.jsonl`` (UTC date). Every batch of
events (one request's) is written with a single ``write`` on a file opened with ``O_APPEND`` while holding an
exclusive ``flock`` on it, so several processes (or threads) sharing one file never lose or interleave lines.
Writing a trace never fails a query: errors are logged and counted, and the caller carries on. Trace files are
created readable and writable by the service's user only (0600): they hold what people asked.

A query's events need not be written before it is answered: ``submit`` (what ``/query``, ``/gis``, ``/context``,
``/chat`` and the MCP tools use) queues them and one background thread per process (``_FLUSHER``) appends
everything queued within ``FLUSH_DELAY_S`` in one block, so requests share one write (and one open, lock and
close), no request waits for the file (a slow disk or a lock held elsewhere delays the trace, not the answer), and
the thread does not compete with the request that queued the events while it is being answered. At most
``MAX_QUEUED_EVENTS`` wait: a target that stays unwritable drops (and counts) further blocks rather than growing
the process. The queue is emptied by ``flush`` (the app calls it at shutdown) and, whatever else happens, before
the interpreter exits: the flusher is a ``concurrent.futures`` thread, which Python finishes before exiting.

``write`` appends at once, after whatever was queued before it, so traces stay in the order the requests were
answered. ``write_through`` does the same but waits for the file at most ``wait_s``; then it queues the events
(audit records: on disk before the answer unless the file is locked elsewhere) or drops them and says so
(``/feedback``, whose answer says what was recorded: a 503 after ``FEEDBACK_WAIT_S``, so a retry records it once).

Trace ids are signed (``TraceSigner``): ``<uuid>.<index version>.<signature>``, where the signature binds the
uuid, the caller's role, the version and a short keyed tag of every chunk the answer returned. ``/feedback`` accepts
only a trace this service issued, to the same role, for chunks that trace returned, with no per-process memory:
every worker and replica sharing the secret (``RAG_TRACE_SECRET``, or one generated once under the trace
directory) can check it.

Events record bounded summaries of what a caller sent (``bounded``): a huge filter list is counted, hashed and
shortened to its first values instead of being repeated in every event. A request's trace costs at most one line per
result plus one (so a trace stays small whatever the query and ``top_k``): the first event of a request (its
*record*) carries the query (cut to ``QUERY_CHARS`` characters and ``QUERY_BYTES`` bytes), the summaries and the
shared fields once; every other returned chunk gets one small *hit* line (``HIT_FIELDS``). Events name a trace by
its key (``trace_key``: the uuid of the signed id), never by the signed id, whose per-chunk tags would make every
line grow with ``top_k``. The same answer given again to the same caller within ``REPEAT_WINDOW_S``
(``RepeatWindow``) is written as one small line naming the first (``context.repeat_of``), so repeats cost a line
each, not a full trace.

A block of events either lands whole or not at all: an append that fails part way (a full disk) cuts the file
back to where the block began, and each append first makes sure the file ends with a complete line (a process
killed mid-write leaves a torn one: it is cut off), so a later line is never glued to a torn one. ``/feedback``
writes with ``sync``: its answer says what was recorded, so it is on disk (``fdatasync``) before it is given.
"""

from __future__ import annotations

import base64
import collections
import fcntl
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from livemem.extras import require

log = logging.getLogger(__name__)


TRACE_SECRET_ENV = "RAG_TRACE_SECRET"
TRACE_SECRET_FILE = ".trace-secret"
TAG_BYTES = 6  # per returned chunk: a forged chunk passes with probability (returned chunks) / 2**48
MAC_BYTES = 16
TRACE_ID_PATTERN = (
    r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.[A-Za-z0-9_-]{1,200}\.[A-Za-z0-9_-]{22,}$"
)
_TRACE_ID = re.compile(TRACE_ID_PATTERN)


# The keys of the traces the current request emits, for its access log line: the serving app sets a fresh list
# per request (serving.logs); the threads answering it share the list (a copied context holds the same object).
REQUEST_TRACES: ContextVar[list[str] | None] = ContextVar("livemem_request_traces", default=None)


def _note_traces(events: list[dict[str, Any]]) -> None:
    keys = REQUEST_TRACES.get()
    if keys is None:
        return
    for event in events:
        found = event.get("trace_id")
        if found and (key := trace_key(str(found))) not in keys:
            keys.append(key)


def trace_key(trace_id: str) -> str:
    """How trace events name a trace: the uuid of a signed id (``<uuid>.<version>.<signature>``), any other id as
    it is. The signature carries a tag per returned chunk (over a kilobyte for 200 results): it stays with the
    caller, who needs it for ``/feedback``; the events of one request share the key."""
    return trace_id.split(".", 1)[0]


@dataclass(frozen=True)
class IssuedTrace:
    """A trace id this service signed, checked against the caller's role."""

    trace_id: str
    index_version: str
    _uuid: str
    _tags: frozenset[bytes]
    _signer: TraceSigner

    def returned(self, chunk_id: str) -> bool:
        """Whether the answer behind this trace returned ``chunk_id``."""
        return self._signer._tag(self._uuid, chunk_id) in self._tags


class TraceSigner:
    """Issues and checks signed trace ids (HMAC-SHA256 with a secret all workers and replicas share)."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ValueError("the trace secret must be at least 16 bytes")
        self._secret = secret

    @classmethod
    def for_directory(cls, directory: str | os.PathLike[str], configured: str | None = None) -> TraceSigner:
        """The ``configured`` secret when given (``RAG_TRACE_SECRET``: replicas on several machines set the same
        one); otherwise a secret generated once under ``directory`` (mode 0600) that every process using that
        directory shares."""
        if configured:
            return cls(configured.encode("utf-8"))
        try:
            return cls(shared_secret(Path(directory) / TRACE_SECRET_FILE))
        except (OSError, ValueError) as exc:
            log.warning(
                "no shared trace secret (%s); trace ids are signed with a per-process key, so feedback is "
                "accepted only by the process that answered: set %s",
                exc,
                TRACE_SECRET_ENV,
            )
            return cls(secrets.token_bytes(32))

    def issue(self, *, role: str, index_version: str, chunk_ids: Iterable[str]) -> str:
        """A new trace id for an answer returning ``chunk_ids`` to ``role`` from ``index_version``."""
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,200}", index_version):
            raise ValueError(f"index version {index_version!r} cannot be part of a trace id")
        trace_uuid = str(uuid.uuid4())
        tags = b"".join(self._tag(trace_uuid, c) for c in dict.fromkeys(chunk_ids))
        mac = self._mac(trace_uuid, role, index_version, tags)
        payload = base64.urlsafe_b64encode(mac + tags).rstrip(b"=").decode("ascii")
        return f"{trace_uuid}.{index_version}.{payload}"

    def verify(self, trace_id: str, *, role: str) -> IssuedTrace | None:
        """The trace behind ``trace_id`` when this service issued it to ``role``; None otherwise."""
        if not _TRACE_ID.fullmatch(trace_id):
            return None
        trace_uuid, index_version, payload = trace_id.split(".")
        try:
            raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
        except ValueError:
            return None
        mac, tags = raw[:MAC_BYTES], raw[MAC_BYTES:]
        if len(mac) != MAC_BYTES or len(tags) % TAG_BYTES:
            return None
        if not hmac.compare_digest(mac, self._mac(trace_uuid, role, index_version, tags)):
            return None
        found = frozenset(tags[i : i + TAG_BYTES] for i in range(0, len(tags), TAG_BYTES))
        return IssuedTrace(trace_id, index_version, trace_uuid, found, self)

    def caller_tag(self, identity: str) -> str:
        """A short keyed tag of a caller's identity (its API key's scope, or its network address) for trace events:
        the same caller gets the same tag from every worker and replica sharing the key, and the tag does not give
        the address or key back (a plain hash of an IPv4 address could be reversed by trying them all)."""
        digest = hmac.digest(self._secret, b"caller\0" + identity.encode("utf-8", "surrogatepass"), "sha256")
        return base64.urlsafe_b64encode(digest[:12]).decode("ascii")

    def _mac(self, trace_uuid: str, role: str, index_version: str, tags: bytes) -> bytes:
        head = "\0".join(("trace", trace_uuid, role, index_version)).encode("utf-8") + b"\0"
        return hmac.digest(self._secret, head + tags, "sha256")[:MAC_BYTES]

    def _tag(self, trace_uuid: str, chunk_id: str) -> bytes:
        message = "\0".join(("chunk", trace_uuid, chunk_id)).encode("utf-8")
        return hmac.digest(self._secret, message, "sha256")[:TAG_BYTES]  # one C call (OpenSSL's one-shot HMAC)


def shared_secret(path: Path) -> bytes:
    """The secret stored at ``path``, created (0600, atomically: the first process wins) when missing."""
    try:
        return _read_secret(path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, secrets.token_hex(32).encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # fails when another process created it first: then theirs is the one
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    return _read_secret(path)


def _read_secret(path: Path) -> bytes:
    secret = path.read_bytes().strip()
    if len(secret) < 32:
        raise ValueError(f"the trace secret in {path} is too short")
    return secret


SUMMARY_VALUES = 5
SUMMARY_CHARS = 200
QUERY_CHARS = 4000


def bounded(value: Any) -> Any:
    """``value`` as a trace records it: lists over 5 items become {count, first, sha256}; strings over 200
    characters are cut (with their length and hash), so no request can make a trace event large."""
    if isinstance(value, str):
        if len(value) <= SUMMARY_CHARS:
            return value
        return {"chars": len(value), "first": value[:SUMMARY_CHARS], "sha256": _digest(value)}
    if isinstance(value, dict):
        return {str(k)[:SUMMARY_CHARS]: bounded(v) for k, v in list(value.items())[:50]}
    if isinstance(value, list | tuple):
        if len(value) <= SUMMARY_VALUES:
            return [bounded(v) for v in value]
        return {"count": len(value), "first": [bounded(v) for v in value[:SUMMARY_VALUES]], "sha256": _digest(value)}
    return value


def _digest(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def utc_timestamp() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


FLUSH_DELAY_S = 0.05
MAX_QUEUED_EVENTS = 100_000  # ≈ 100 MB of events waiting for an unwritable target; beyond it, blocks are dropped
FEEDBACK_WAIT_S = 2.0  # the longest /feedback waits for the trace file's lock (other writers hold it for µs)
SCRAPE_FLUSH_WAIT_S = 1.0  # the longest a /metrics scrape waits to flush the queue before reporting
SHUTDOWN_FLUSH_WAIT_S = 5.0  # the longest a stopping app waits to flush the queue (then the flusher thread may still)

# One thread per process appends what every writer queued; its queue is FIFO, so each writer's blocks keep their
# order. concurrent.futures finishes the queued work of its threads before the interpreter exits.
_FLUSHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trace-writer")


def _new_flusher() -> None:
    global _FLUSHER
    _FLUSHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trace-writer")


os.register_at_fork(after_in_child=_new_flusher)  # a forked child has no flusher thread, only its record


class _QueuedWrites:
    """``submit`` (queue, written soon by the flusher thread) and ``write`` (now, after what was queued) over a
    writer's ``_append``, which writes one block of events and says whether it could."""

    directory: Path | str  # where the events go, as logs name it

    def __init__(self, max_queued: int = MAX_QUEUED_EVENTS) -> None:
        self.written = 0
        self.failures = 0
        self.dropped = 0  # events not queued because the queue was full (also counted in ``failures``, per block)
        self.max_queued = max_queued
        self._queued = 0  # events in ``_pending``
        self._count_lock = threading.Lock()
        self._pending: collections.deque[list[dict[str, Any]]] = collections.deque()
        self._write_lock = threading.Lock()  # held while taking from the queue and appending: keeps the order
        self._scheduled = False
        self.repeats = RepeatWindow()  # answers written lately, so a repeat is one line (``retrieval_events``)

    def _append(self, events: list[dict[str, Any]], deadline: float | None = None, sync: bool = False) -> bool | None:
        """Write one block, whole or not at all (``sync``: and on stable storage before returning); True / False:
        written or failed; None: the target stayed busy past ``deadline`` (``time.monotonic()``; None waits as long
        as it takes) and nothing was written."""
        raise NotImplementedError

    def submit(self, events: Iterable[dict[str, Any]]) -> None:
        """Queue events to be appended soon, off the caller's thread (a failure is logged and counted). When the
        target has been unwritable for so long that ``max_queued`` events wait, further blocks are dropped and
        counted (``dropped``, ``failures``) instead of growing the process without bound."""
        block = list(events)
        _note_traces(block)
        with self._count_lock:
            if self._queued + len(block) > self.max_queued:
                self.dropped += len(block)
                self.failures += 1
                if self.failures == 1 or self.failures % 1000 == 0:
                    log.warning("trace queue full (%d events waiting for %s): %d events dropped so far",
                                self._queued, self.directory, self.dropped)  # fmt: skip
                return
            self._queued += len(block)
            self._pending.append(block)
        self._schedule()

    def write(self, events: Iterable[dict[str, Any]]) -> bool:
        """Append events now, after any queued before them; False (and logged) when the write failed."""
        events = list(events)
        _note_traces(events)
        return bool(self._write_queue_and(events, None))

    def write_through(
        self, events: Iterable[dict[str, Any]], wait_s: float, queue: bool = True, sync: bool = False
    ) -> bool | None:
        """Append events now, as ``write`` does, if the file can be had within ``wait_s``; else queue them
        (``submit``; with ``queue`` false: drop them, for the caller to say so) and return None. For records that
        should be on disk before the answer they describe leaves (audit records, feedback), without letting a file
        locked elsewhere hold the answer up for longer than ``wait_s``. ``sync``: True only once the block is on
        stable storage (``fdatasync``; a full disk often says so only then), for answers that say it was recorded."""
        events = list(events)
        _note_traces(events)
        done = self._write_queue_and(events, wait_s, sync)
        if done is None and queue:
            self.submit(events)
        return done

    def _flush_soon(self) -> None:
        time.sleep(FLUSH_DELAY_S)  # what other requests queue meanwhile goes in the same write
        self.flush()

    def flush(self, wait_s: float | None = None) -> bool:
        """Append everything queued so far; False when that write failed (the events are counted as failed) or,
        with ``wait_s``, when the target stayed busy that long (then the events stay queued for the flusher
        thread: a ``/metrics`` scrape or a shutdown does not hang on a file locked elsewhere)."""
        with self._count_lock:
            self._scheduled = False
        try:
            done = self._write_queue_and([], wait_s)
        except Exception:  # on the flusher thread nobody would see it: say so, count it
            log.exception("could not write queued trace events to %s", self.directory)
            with self._count_lock:
                self.failures += 1
            return False
        if done is None:
            self._schedule()  # still queued: the flusher (perhaps waiting for the file right now) writes them
        return bool(done)

    def _write_queue_and(self, events: list[dict[str, Any]], wait_s: float | None, sync: bool = False) -> bool | None:
        """Append what is queued, then ``events``, as one block: True / False, written or failed; None when the
        writer's lock or the target could not be had within ``wait_s`` (None: as long as it takes), with the queue
        as it was and ``events`` not written. The writer's lock keeps blocks in order; the flusher may hold it
        while it waits for the file itself."""
        deadline = None if wait_s is None else time.monotonic() + wait_s
        if not self._write_lock.acquire(timeout=-1 if wait_s is None else wait_s):
            return None
        try:
            pending = self._take_pending()
            block = [*pending, *events]
            done = self._append(block, deadline=deadline, sync=sync) if block else True
            if done is None:
                self._put_back(pending)
            return done
        finally:
            self._write_lock.release()

    def _put_back(self, events: list[dict[str, Any]]) -> None:
        """Return taken events to the front of the queue (in order, before what was queued meanwhile) and make
        sure a flush will take them."""
        if events:
            with self._count_lock:
                self._queued += len(events)
                self._pending.appendleft(events)
            self._schedule()

    def _schedule(self) -> None:
        with self._count_lock:
            if self._scheduled:  # the flush already scheduled takes what is queued
                return
            self._scheduled = True
        _FLUSHER.submit(self._flush_soon)

    def _take_pending(self) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        with self._count_lock:
            while self._pending:
                events.extend(self._pending.popleft())
            self._queued = 0
        return events


class TraceWriter(_QueuedWrites):
    """Appends trace events to the day's file for this host and process (or to a shared ``name``)."""

    directory: Path

    def __init__(self, directory: str | os.PathLike[str], name: str | None = None) -> None:
        super().__init__()
        self.directory = Path(directory)
        self.name = name
        self.host = socket.gethostname().replace("/", "_") or "host"

    def path_for(self, day: str) -> Path:
        suffix = self.name or f"{self.host}-{os.getpid()}"
        return self.directory / f"{day}-{suffix}.jsonl"

    def _append(self, events: list[dict[str, Any]], deadline: float | None = None, sync: bool = False) -> bool | None:
        """Append events as one block of lines; returns False (and logs) when the write failed, None (nothing
        written) when another holder kept the file locked past ``deadline``. A write that fails part way (``ENOSPC``,
        ``EFBIG``, ``EIO``) is taken back: the file is cut to where the block began (``_take_back``), so it never
        ends in a torn line; and a torn line left by someone else (a process killed mid-write) is cut off before the
        block is appended (``_complete_lines``), so no line is ever glued to one."""
        lines = "".join(json.dumps(e, ensure_ascii=False, separators=(",", ":")) + "\n" for e in events)
        if not lines:
            return True
        data = lines.encode("utf-8")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.path_for(datetime.now(UTC).strftime("%Y-%m-%d"))
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)  # read: its last line is checked
            try:
                if os.fstat(fd).st_mode & 0o077:  # a file from before traces were private
                    os.fchmod(fd, 0o600)
                if not _lock(fd, deadline):
                    return None
                start = _complete_lines(fd, path)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                    if sync:
                        os.fdatasync(fd)
                except OSError:
                    _take_back(fd, start, path)
                    raise
            finally:
                os.close(fd)  # closing releases the lock
        except OSError as exc:
            with self._count_lock:
                self.failures += 1
            log.warning("could not write %d trace bytes to %s: %s", len(data), self.directory, exc)
            return False
        with self._count_lock:
            self.written += lines.count("\n")
        return True


TAIL_READ_BYTES = 65536


def _complete_lines(fd: int, path: Path) -> int:
    """Make the locked file ``fd`` end with a complete line and return its size: a torn last line (no newline: a
    writer killed mid-write, or a failed write that could not be taken back) is cut off, back to the last newline,
    and logged; when the file cannot be cut, a newline ends the torn line instead (the rollup skips it as
    malformed and reads on). One ``fstat`` and a one-byte ``pread`` when the file is whole, as it nearly always is."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    end = size
    cut = 0
    while end > 0:
        begin = max(0, end - TAIL_READ_BYTES)
        found = os.pread(fd, end - begin, begin).rfind(b"\n")
        if found >= 0:
            cut = begin + found + 1
            break
        end = begin
    try:
        os.ftruncate(fd, cut)
    except OSError as exc:
        log.warning("%s ends in a torn line that could not be cut (%s): ending it with a newline", path, exc)
        os.write(fd, b"\n")
        return size + 1
    log.warning("%s ended in a torn line (%d bytes, no newline): cut off before appending", path, size - cut)
    return cut


def _take_back(fd: int, start: int, path: Path) -> None:
    """After a failed append, cut the file back to ``start`` (its size before the block): shrinking needs no free
    space. If even that fails, the next append cuts the torn line (``_complete_lines``)."""
    try:
        os.ftruncate(fd, start)
    except OSError as exc:
        log.warning("could not take a failed append back from %s: %s", path, exc)


def _lock(fd: int, deadline: float | None) -> bool:
    """Take the exclusive ``flock`` on ``fd``: waiting as long as it takes (``deadline`` None), or until
    ``deadline`` (``time.monotonic()``), then False."""
    if deadline is None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return True
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.002)


TRACE_TABLE = "living_memory_traces"
POSTGRES_STATEMENT_TIMEOUT_S = 5.0


class PostgresTraceWriter(_QueuedWrites):
    """Appends trace events to a Postgres table instead of files, for many serving replicas on many machines.

    One row per event (``ts``, ``trace_id``, ``event`` as jsonb); a block of events (one request's, or what was
    queued together) goes in one transaction, so they land together or not at all. Like the file writer, a failure
    is logged and counted, never raised. The nightly rollup reads the table when ``RAG_TRACE_DSN`` is set
    (``livemem.usage.attention``).
    """

    def __init__(self, dsn: str, table: str = TRACE_TABLE) -> None:
        super().__init__()
        if not table.replace("_", "").isalnum():
            raise ValueError(f"trace table name {table!r} must be letters, digits and underscores")
        self.dsn = dsn
        self.table = table
        self.directory = f"postgres table {table}"
        self.statement_timeout_s = POSTGRES_STATEMENT_TIMEOUT_S
        self._local = threading.local()

    def _connection(self):
        psycopg = require("postgres", "psycopg", f"the usage traces' {self.directory}")

        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            conn = psycopg.connect(self.dsn, connect_timeout=5)
            # a table locked elsewhere fails the write after this long instead of blocking the writer for good
            conn.execute(f"SET statement_timeout = {int(self.statement_timeout_s * 1000)}")
            conn.commit()
            ensure_trace_table(conn, self.table)
            self._local.conn = conn
        return conn

    def _append(self, events: list[dict[str, Any]], deadline: float | None = None, sync: bool = False) -> bool | None:
        """One transaction per block (``deadline`` is for file locks; a database write is bounded by the
        connection's ``statement_timeout``, ``POSTGRES_STATEMENT_TIMEOUT_S``; a committed transaction is durable,
        so ``sync`` asks nothing more)."""
        rows = [(e["timestamp"], e.get("trace_id"), json.dumps(e, ensure_ascii=False)) for e in events]
        if not rows:
            return True
        try:
            conn = self._connection()
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(f"INSERT INTO {self.table} (ts, trace_id, event) VALUES (%s, %s, %s)", rows)
        except Exception as exc:  # any database failure: count it, never fail the query
            self._local.conn = None
            with self._count_lock:
                self.failures += 1
            log.warning("could not write %d trace events to %s: %s", len(rows), self.directory, exc)
            return False
        with self._count_lock:
            self.written += len(rows)
        return True


def ensure_trace_table(conn: Any, table: str = TRACE_TABLE) -> None:
    """Create the trace table if missing. ``CREATE ... IF NOT EXISTS`` is not safe when several processes run it
    at once, so creation is serialised with a transaction-scoped advisory lock."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"living-memory:{table}"])
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {table} (id BIGSERIAL PRIMARY KEY, ts TIMESTAMPTZ NOT NULL, "
            f"trace_id TEXT, event JSONB NOT NULL)"
        )
        cur.execute(f"CREATE INDEX IF NOT EXISTS {table}_ts ON {table} (ts)")


def trace_writer(directory: str | os.PathLike[str], dsn: str | None = None) -> TraceWriter | PostgresTraceWriter:
    """Files under ``directory``, or the Postgres table when a DSN is configured (``RAG_TRACE_DSN``)."""
    return PostgresTraceWriter(dsn) if dsn else TraceWriter(directory)


HIT_FIELDS = ("timestamp", "event", "trace_id", "chunk_id", "rank", "score", "breath_phase", "context")
QUERY_BYTES = 8192  # the most a stored query takes as JSON (4,000 characters of control codes escape to 24 kB)
SUMMARY_BYTES = 4096  # the most a request's filters and collections take in its record (else only their hash)
REPEAT_WINDOW_S = 60.0  # the same answer to the same caller within this long is written as a one-line repeat
REPEAT_KEYS = 10_000  # answers remembered per process for that (least recently used forgotten first)


def _stored_query(query: str) -> str:
    """The query as a request record keeps it: at most ``QUERY_CHARS`` characters and ``QUERY_BYTES`` of JSON."""
    text = query[:QUERY_CHARS]
    if len(text) <= QUERY_BYTES // 6:  # no character takes more than 6 bytes as JSON (\u0000)
        return text
    while len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass")) > QUERY_BYTES:
        text = text[: len(text) * 3 // 4]
    return text


def _summary(filters: dict[str, Any], collections: list[str]) -> dict[str, Any]:
    summary = {"filters": bounded(filters), "collections": bounded(collections)}
    if len(json.dumps(summary, ensure_ascii=False, default=str)) > SUMMARY_BYTES:
        return {"filters": {"sha256": _digest(filters)}, "collections": {"sha256": _digest(collections)}}
    return summary


def retrieval_events(
    *,
    trace_id: str,
    query: str,
    chunk_ids: list[str],
    scores: list[float],
    role: str,
    breath_phase: str | None,
    index_version: str,
    mode: str,
    return_: str,
    filters: dict[str, Any],
    collections: list[str],
    cache_hit: bool,
    repeat_of: str | None = None,
) -> list[dict[str, Any]]:
    """A request's ``retrieval`` events: its record (the first returned chunk, or ``chunk_id`` null when nothing
    was returned), which alone carries the query, the caller's summaries and the shared fields, then one small hit
    event (``HIT_FIELDS``) per further chunk. So a request writes one line per result plus a bounded record,
    linear in ``top_k``. ``repeat_of``: the key of an earlier trace that gave this caller this same answer
    (``RepeatWindow``): then only one line is written, naming it.

    Every event has its own ``context`` dict (callers mark them, e.g. ``kind``)."""
    key = trace_key(trace_id)
    timestamp = utc_timestamp()
    record: dict[str, Any] = {
        "timestamp": timestamp,
        "event": "retrieval",
        "trace_id": key,
        "chunk_id": None,
        "query": None if repeat_of else _stored_query(query),
        "breath_phase": breath_phase,
        "agent": "serving",
        "role": role,
        "useful": None,
        "index_version": index_version,
    }
    if repeat_of:
        context = {"repeat_of": trace_key(repeat_of), "results": len(chunk_ids), "mode": mode, "return": return_,
                   "cache_hit": cache_hit}  # fmt: skip
        return [{**record, "context": context}]
    context = {"mode": mode, "return": return_, **_summary(filters, collections), "cache_hit": cache_hit}
    if not chunk_ids:
        return [{**record, "context": context}]
    events = [{**record, "chunk_id": chunk_ids[0], "rank": 1, "score": scores[0], "context": context}]
    events += [
        {
            "timestamp": timestamp,
            "event": "retrieval",
            "trace_id": key,
            "chunk_id": cid,
            "rank": rank,
            "score": score,
            "breath_phase": breath_phase,
            "context": {},
        }
        for rank, (cid, score) in enumerate(zip(chunk_ids[1:], scores[1:], strict=True), start=2)
    ]
    return events


def feedback_events(
    *, trace_id: str, chunk_ids: list[str], useful: bool, role: str, breath_phase: str | None, index_version: str,
    comment: str | None = None, caller: str | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """One ``feedback`` event per chunk judged (one with ``chunk_id`` null for the whole answer). The first carries
    the chunks judged together and the comment, once; ``caller`` (``TraceSigner.caller_tag``) is who judged: the
    rollup counts one verdict per caller and chunk a day (``livemem.usage.attention.judgements``)."""
    common = {
        "timestamp": utc_timestamp(),
        "event": "feedback",
        "trace_id": trace_key(trace_id),
        "query": None,
        "breath_phase": breath_phase,
        "agent": "serving",
        "role": role,
        "useful": useful,
        "index_version": index_version,
    }
    if caller:
        common["caller"] = caller
    first: dict[str, Any] = {"related_chunks": list(chunk_ids)}
    if comment:
        first["comment"] = comment
    return [
        {**common, "chunk_id": cid, "context": first if n == 0 else {}} for n, cid in enumerate(chunk_ids or [None])
    ]


class RepeatWindow:
    """The answers one process gave lately, by caller: the same answer (same request, same results) to the same
    caller within ``window_s`` of the first is a repeat, traced as one line naming the first trace instead of a
    full trace (``retrieval_events(repeat_of=...)``). At most ``max_keys`` answers are remembered (the least
    recently used forgotten first); the window runs from the first, so an answer is traced in full at least once
    per window and caller."""

    def __init__(self, window_s: float = REPEAT_WINDOW_S, max_keys: int = REPEAT_KEYS, timer=time.monotonic) -> None:
        from cachetools import TTLCache

        self._seen: TTLCache = TTLCache(max_keys, window_s, timer=timer)
        self._lock = threading.Lock()

    def first(self, caller: str, request: str, chunk_ids: list[str], trace_id: str) -> str | None:
        """The key of the trace that first gave ``caller`` this answer within the window; None (and ``trace_id``
        remembered as the first) when this is the first."""
        answer = hashlib.sha256("\0".join((caller, request, *chunk_ids)).encode("utf-8", "surrogatepass")).digest()
        with self._lock:
            found = self._seen.get(answer)
            if found is None:
                self._seen[answer] = trace_key(trace_id)
            return found
