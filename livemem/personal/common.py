"""Personal memory: its constants, limits, user keys and the score nudge of a judged chunk.

Part of ``livemem.personal`` (its package docstring says how personal memory works)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from livemem.dates import utc_now
from livemem.settings import PersonalSettings

PERSONAL_DIR_ENV = "LIVEMEM_PERSONAL_DIR"
DEFAULT_RETENTION_DAYS = 365  # PersonalSettings.retention_days, passed down by the entry point
DEFAULT_MAX_USERS = 1000  # PersonalSettings.max_users_per_key, likewise
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
    return event_iso(now or utc_now())


class MemoryFull(Exception):
    """The user already holds ``MAX_ITEMS`` cards and exchanges."""


class TooManyUsers(Exception):
    """The API key already keeps memory for ``LIVEMEM_PERSONAL_MAX_USERS_PER_KEY`` users, and this is a new one."""


@dataclass(frozen=True)
class PersonalStore:
    """One deployment's personal memory: its directory, the database of its log (``dsn``: the traces' Postgres,
    ``RAG_TRACE_DSN``; None: ``log.sqlite`` in the directory), how long it keeps items and how many users one key
    may have. Built once by an entry point from its settings (``configured``) and handed to every call."""

    directory: Path
    dsn: str | None = None
    retention_days: int = DEFAULT_RETENTION_DAYS
    max_users: int = DEFAULT_MAX_USERS

    @classmethod
    def configured(
        cls, settings: PersonalSettings, index_dir: str | os.PathLike[str], dsn: str | None = None
    ) -> PersonalStore:
        """The store of ``settings`` (``LIVEMEM_PERSONAL_*``) for the index home ``index_dir``."""
        return cls(settings.directory(Path(index_dir)), dsn, settings.retention_days, settings.max_users_per_key)


def user_key(scope: str, user_id: str | None) -> str:
    """The user: the caller's key scope (``livemem.answer.conversation.caller_scope``), or a ``user_id`` inside it."""
    return f"{scope}/{user_id}" if user_id else scope


def event_iso(value: datetime) -> str:
    """An event time as the log and snapshots store it: UTC, to the second, with a ``Z``."""
    return value.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def nudge_factor(votes: int) -> float:
    """The score factor of a chunk a user judged: net useful votes, bounded (docs/personal-memory.md)."""
    return 1.0 + NUDGE_STEP * max(-NUDGE_VOTES, min(NUDGE_VOTES, votes))


def normalized_text(text: str) -> str:
    return " ".join(text.lower().split())


def item_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
