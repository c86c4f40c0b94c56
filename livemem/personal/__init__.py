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

The modules, in the data's order: ``common`` (constants, limits, user keys, the nudge), ``log`` (the append-only
log), ``snapshots``, ``view`` (what one request reads), ``writes`` (the API's appends) and ``consolidation`` (the
daily asset). Callers use the names below as ``personal.X``.
"""

from __future__ import annotations

from livemem.personal.common import (
    CURRENT,
    DEFAULT_MAX_USERS,
    DEFAULT_RETENTION_DAYS,
    EXCHANGE_ANSWER_CHARS,
    KINDS,
    LOG_FILE,
    MAX_ITEMS,
    NUDGE_POOL,
    NUDGE_STEP,
    NUDGE_VOTES,
    PERSONAL_DIR_ENV,
    PERSONAL_TABLE,
    SNAPSHOTS,
    TRACE_DSN_ENV,
    MemoryFull,
    PersonalStore,
    TooManyUsers,
    event_iso,
    item_hash,
    normalized_text,
    nudge_factor,
    user_key,
)
from livemem.personal.consolidation import Consolidation, consolidate
from livemem.personal.log import PersonalLog, PostgresPersonalLog, log_for
from livemem.personal.snapshots import (
    MemorySnapshot,
    cached_snapshot,
    current_snapshot_id,
    load_memory_snapshot,
    write_snapshot,
)
from livemem.personal.view import PersonalView, encoded, item_text, read_view
from livemem.personal.writes import add_card, add_exchange, add_feedback, admit_user, delete, users_holding

__all__ = [
    "CURRENT",
    "DEFAULT_MAX_USERS",
    "DEFAULT_RETENTION_DAYS",
    "EXCHANGE_ANSWER_CHARS",
    "KINDS",
    "LOG_FILE",
    "MAX_ITEMS",
    "NUDGE_POOL",
    "NUDGE_STEP",
    "NUDGE_VOTES",
    "PERSONAL_DIR_ENV",
    "PERSONAL_TABLE",
    "SNAPSHOTS",
    "TRACE_DSN_ENV",
    "Consolidation",
    "MemoryFull",
    "MemorySnapshot",
    "PersonalLog",
    "PersonalStore",
    "PersonalView",
    "PostgresPersonalLog",
    "TooManyUsers",
    "add_card",
    "add_exchange",
    "add_feedback",
    "admit_user",
    "cached_snapshot",
    "consolidate",
    "current_snapshot_id",
    "delete",
    "encoded",
    "event_iso",
    "item_hash",
    "item_text",
    "load_memory_snapshot",
    "log_for",
    "normalized_text",
    "nudge_factor",
    "read_view",
    "user_key",
    "users_holding",
    "write_snapshot",
]
