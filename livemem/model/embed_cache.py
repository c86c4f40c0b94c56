"""The embedding cache: vectors by ``cache_key(model id, text)``, so identical text is never embedded twice,
across builds, sources and steps (chunks, GBIM entities).

A SQLite file (``<home>/cache/embeddings.sqlite``), one row per key in a ``WITHOUT ROWID`` B-tree: a build that
embeds one changed chunk looks up and adds a handful of keys, touching a few pages, whatever the cache holds.
(It was a DuckDB table with a PRIMARY KEY before: DuckDB rewrites a whole ART index at every checkpoint, so even a
one-vector build spent a second closing the file at 123k vectors, and a table without the index had to scan every
key for each lookup.) A cache written by that layout (``embeddings.duckdb``) is copied in once and removed.

One writer at a time: builds hold the index home's write lock.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import numpy as np

from livemem.model.embedding import DIM, cache_key

log = logging.getLogger(__name__)

CACHE_FILE = "embeddings.sqlite"
_OLD_CACHE_FILE = "embeddings.duckdb"
_BATCH = 500  # keys per lookup statement (SQLite allows 32,766 parameters)


class _Encoder(Protocol):
    model_id: str

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


class EmbeddingCache:
    """Vectors by key in ``<cache_dir>/embeddings.sqlite``; use as a context manager (commits on close)."""

    def __init__(self, cache_dir: Path, dim: int = DIM) -> None:
        cache_dir.mkdir(parents=True, exist_ok=True)
        self.dim = dim
        self.path = cache_dir / CACHE_FILE
        self.con = sqlite3.connect(self.path, isolation_level=None)
        self.con.execute("PRAGMA journal_mode = WAL")
        self.con.execute("PRAGMA synchronous = NORMAL")
        self.con.execute(
            "CREATE TABLE IF NOT EXISTS embeddings (key TEXT PRIMARY KEY, vector BLOB NOT NULL) WITHOUT ROWID"
        )
        old = cache_dir / _OLD_CACHE_FILE
        if old.exists():
            self._import(old)

    def _import(self, old: Path) -> None:
        import duckdb

        try:
            src = duckdb.connect(str(old), read_only=True)
            try:
                cursor = src.execute("SELECT key, vector FROM embeddings")
                with self._transaction():
                    while batch := cursor.fetchmany(10_000):
                        self.con.executemany("INSERT OR IGNORE INTO embeddings VALUES (?, ?)", batch)
            finally:
                src.close()
        except duckdb.Error as exc:  # a cache: what cannot be read is recomputed
            log.warning("the old embedding cache %s could not be read (%s); vectors are recomputed", old.name, exc)
        old.unlink(missing_ok=True)
        old.with_name(old.name + ".wal").unlink(missing_ok=True)

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """One transaction (the connection is in autocommit mode, so ``with self.con`` would not begin one)."""
        self.con.execute("BEGIN")
        try:
            yield
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        self.con.execute("COMMIT")

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self.con.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0]

    def get_many(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        unique = list(dict.fromkeys(keys))
        found: dict[str, np.ndarray] = {}
        for part in _batches(unique, _BATCH):
            marks = ",".join("?" * len(part))
            for key, blob in self.con.execute(f"SELECT key, vector FROM embeddings WHERE key IN ({marks})", part):
                found[key] = np.frombuffer(blob, dtype=np.float32)
        return found

    def put_many(self, items: dict[str, np.ndarray]) -> None:
        if not items:
            return
        with self._transaction():
            self.con.executemany(
                "INSERT OR IGNORE INTO embeddings VALUES (?, ?)",
                ((k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in items.items()),
            )

    def embed(
        self, texts: Sequence[str], embedder: _Encoder, progress: Callable[[int, int], None] | None = None
    ) -> tuple[np.ndarray, int, int]:
        """Vectors for ``texts`` (cached or computed), the number computed and the number reused."""
        keys = [cache_key(embedder.model_id, t) for t in texts]
        found = self.get_many(keys)
        missing: dict[str, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key not in found and key not in missing:
                missing[key] = text
        # Longest first, so each batch holds texts of similar length (little padding), as one big encode call would.
        todo = sorted(missing.items(), key=lambda item: len(item[1]), reverse=True)
        step = 2048
        for start in range(0, len(todo), step):
            part = todo[start : start + step]
            vectors = embedder.encode([t for _, t in part])
            computed = {k: v for (k, _), v in zip(part, vectors, strict=True)}
            self.put_many(computed)
            found.update(computed)
            if progress:
                progress(min(start + step, len(todo)), len(todo))
        out = np.stack([found[k] for k in keys]) if keys else np.zeros((0, self.dim), dtype=np.float32)
        return out, len(missing), len(keys) - len(missing)


def _batches(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
