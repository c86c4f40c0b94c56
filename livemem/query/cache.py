"""A bounded, thread-safe LRU cache of query results with hit and miss counters.

Keys include the index version and the model id, so a newly published version can never serve a result
computed on an older one; entries of older versions simply age out.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any


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
        self._entries: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Any | None:
        with self._lock:
            value = self._entries.get(key)
            if value is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: str, value: Any) -> None:
        if self.max_entries <= 0:
            return
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
