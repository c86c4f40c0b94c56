"""A bounded, thread-safe LRU cache of query results with hit and miss counters (``cachetools.LRUCache`` behind a
lock, as every bounded cache of the process: docs/caches.md).

Keys include the index version and the model id, so a newly published version can never serve a result
computed on an older one; entries of older versions simply age out.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from cachetools import LRUCache


def normalise_query(text: str) -> str:
    """Case and whitespace do not change a query's meaning for retrieval (the tokenizers lowercase too)."""
    return " ".join(text.lower().split())


def cache_key(*, query: str, index_version: str, model_id: str, role: str, **options: Any) -> str:
    """A canonical key: normalised query, every option that changes the answer, role, model, index version."""
    return json.dumps([normalise_query(query), index_version, model_id, role, options], sort_keys=True, default=str)


class ResultCache:
    def __init__(self, max_entries: int = 1024) -> None:
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._entries: LRUCache[str, Any] = LRUCache(maxsize=max(1, max_entries))  # 0: put keeps nothing
        self._lock = threading.Lock()  # cachetools caches are not thread-safe (a get reorders too)

    def get(self, key: str) -> Any | None:
        with self._lock:
            value = self._entries.get(key)
            if value is None:
                self.misses += 1
                return None
            self.hits += 1
            return value

    def put(self, key: str, value: Any) -> None:
        if self.max_entries <= 0:
            return
        with self._lock:
            self._entries[key] = value  # the least recently used entry goes when it is full

    def __len__(self) -> int:
        return len(self._entries)
