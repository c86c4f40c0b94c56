"""The answer cache of /context and /chat: LRU with a time-to-live in memory, and an optional persistent tier.

Keys come from ``livemem.query.cache.cache_key`` (normalised message, role, geography, model, index version and the
options that change an answer), so a newly published version or another model can never serve an old answer.
The persistent tier is a SQLite file (e.g. ``<index home>/cache/answers.sqlite``) shared by the processes of one
machine and surviving restarts; its entries expire after the same TTL. Its answers may hold internal text, so the
file (and SQLite's ``-wal`` / ``-shm`` beside it, which SQLite creates with the database file's mode) is readable by
the service's user only: created 0600 in a folder created 0700; an older, wider file is narrowed when it is opened.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from cachetools import TTLCache

log = logging.getLogger(__name__)


class AnswerCache:
    def __init__(self, max_entries: int = 512, ttl_s: float = 600.0, path: Path | None = None) -> None:
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self.path = path
        self.hits: dict[str, int] = {}
        self.misses: dict[str, int] = {}
        self.persistent_hits = 0
        self._memory: TTLCache = TTLCache(maxsize=max(1, max_entries), ttl=ttl_s)
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        if path is not None and max_entries > 0:
            _private_file(path)
            self._db = sqlite3.connect(str(path), check_same_thread=False, timeout=5.0)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, value TEXT, stored_at REAL)")
            self._db.commit()

    def get(self, key: str, kind: str) -> Any | None:
        if self.max_entries <= 0:
            return None
        with self._lock:
            value = self._memory.get(key)
            if value is None and self._db is not None:
                value = self._from_disk(key)
                if value is not None:
                    self.persistent_hits += 1
                    self._memory[key] = value
            counter = self.hits if value is not None else self.misses
            counter[kind] = counter.get(kind, 0) + 1
            return value

    def put(self, key: str, value: Any) -> None:
        if self.max_entries <= 0:
            return
        with self._lock:
            self._memory[key] = value
            if self._db is not None:
                try:
                    self._db.execute(
                        "INSERT OR REPLACE INTO answers VALUES (?, ?, ?)", (key, json.dumps(value), time.time())
                    )
                    self._db.commit()
                except sqlite3.Error as exc:  # the persistent tier is an optimisation, never a failure
                    log.warning("answer cache: could not store in %s: %s", self.path, exc)

    def clear(self) -> int:
        """Drop every entry, in memory and in the persistent tier; returns how many entries were dropped."""
        with self._lock:
            dropped = len(self._memory)
            self._memory.clear()
            if self._db is not None:
                try:
                    dropped = max(dropped, self._db.execute("DELETE FROM answers").rowcount)
                    self._db.commit()
                except sqlite3.Error as exc:
                    log.warning("answer cache: could not clear %s: %s", self.path, exc)
            return dropped

    def _from_disk(self, key: str) -> Any | None:
        if self._db is None:  # callers check first; this narrows the type
            return None
        try:
            row = self._db.execute("SELECT value, stored_at FROM answers WHERE key = ?", (key,)).fetchone()
        except sqlite3.Error as exc:
            log.warning("answer cache: could not read %s: %s", self.path, exc)
            return None
        if row is None or time.time() - row[1] > self.ttl_s:
            return None
        return json.loads(row[0])

    def __len__(self) -> int:
        return len(self._memory)


PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700


def _private_file(path: Path) -> None:
    """``path`` exists and is 0600, as are its ``-wal`` / ``-shm`` files if there are any; a missing folder is created
    0700 (an existing one, such as the index home's ``cache/``, is left as it is)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE))
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            if file.stat().st_mode & 0o777 != PRIVATE_FILE:
                os.chmod(file, PRIVATE_FILE)
        except FileNotFoundError:
            pass
        except OSError as exc:  # another user's file: said, not fatal (SQLite then reports what it cannot do)
            log.warning("answer cache: could not make %s private (0600): %s", file, exc)
