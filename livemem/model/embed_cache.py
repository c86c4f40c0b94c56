"""The embedding cache: vectors by ``cache_key(model id, text)``, so identical text is never embedded twice,
across builds, sources and steps (chunks, GBIM entities).

A SQLite file (``<home>/cache/embeddings.sqlite``), one row per key in a ``WITHOUT ROWID`` B-tree: a build that
embeds one changed chunk looks up and adds a handful of keys, touching a few pages, whatever the cache holds.
(It was a DuckDB table with a PRIMARY KEY before: DuckDB rewrites a whole ART index at every checkpoint, so even a
one-vector build spent a second closing the file at 123k vectors, and a table without the index had to scan every
key for each lookup.) A cache written by that layout (``embeddings.duckdb``) is copied in once and removed.

Each table holds one form of vector (``Store``): ``embeddings`` float32 vectors (chunks, GBIM entities), and a
caller may keep another form in its own table (the build keeps sentence vectors as int8 codes with their scale,
``livemem.ingest.rechunk.SENTENCE_CODES``: a quarter of the bytes to write, and at 123k chunks the cache's writes were
most of a full build's time).

One writer at a time: builds hold the index home's write lock.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from livemem.model.embedding import DIM, cache_key

log = logging.getLogger(__name__)

CACHE_FILE = "embeddings.sqlite"
_OLD_CACHE_FILE = "embeddings.duckdb"
_BATCH = 500  # keys per lookup statement (SQLite allows 32,766 parameters)


class _Encoder(Protocol):
    @property
    def model_id(self) -> str: ...

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


@dataclass(frozen=True)
class Store:
    """One table of the cache: ``pack`` turns computed float32 vectors (rows) into one blob each, and every blob
    reads back as a 1-D array of ``width(dim)`` items of ``dtype``."""

    table: str
    pack: Callable[[np.ndarray], list[bytes]]
    dtype: type = np.float32
    extra: int = 0  # items beyond ``dim`` in each blob

    def width(self, dim: int) -> int:
        return dim + self.extra


FLOAT32 = Store("embeddings", lambda vectors: [row.tobytes() for row in np.asarray(vectors, dtype=np.float32)])


class EmbeddingCache:
    """Vectors by key in ``<cache_dir>/embeddings.sqlite``; use as a context manager (commits on close)."""

    def __init__(self, cache_dir: Path, dim: int = DIM) -> None:
        cache_dir.mkdir(parents=True, exist_ok=True)
        self.dim = dim
        self.path = cache_dir / CACHE_FILE
        self.con = sqlite3.connect(self.path, isolation_level=None)
        self.con.execute("PRAGMA journal_mode = WAL")
        self.con.execute("PRAGMA synchronous = NORMAL")
        # Checkpoint the WAL every ≈100 MB, not every 4 MB (SQLite's default of 1,000 pages): a build's bulk inserts
        # into a B-tree keyed by hashes dirty pages all over it, and each checkpoint rewrites them (150,000 sentence
        # codes: 10.5 s → 8.0 s here). The WAL is checkpointed and removed when the cache is closed.
        self.con.execute("PRAGMA wal_autocheckpoint = 25000")
        self.tables: set[str] = set()
        self._table(FLOAT32)
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

    def _table(self, store: Store) -> str:
        if store.table not in self.tables:
            if not store.table.isidentifier():
                raise ValueError(f"not a table name: {store.table!r}")
            self.con.execute(
                f"CREATE TABLE IF NOT EXISTS {store.table} (key TEXT PRIMARY KEY, vector BLOB NOT NULL) WITHOUT ROWID"
            )
            self.tables.add(store.table)
        return store.table

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

    def get_many(self, keys: Sequence[str], store: Store = FLOAT32) -> dict[str, np.ndarray]:
        table = self._table(store)
        unique = list(dict.fromkeys(keys))
        found: dict[str, np.ndarray] = {}
        for part in _batches(unique, _BATCH):
            marks = ",".join("?" * len(part))
            for key, blob in self.con.execute(f"SELECT key, vector FROM {table} WHERE key IN ({marks})", part):
                found[key] = np.frombuffer(blob, dtype=store.dtype)
        return found

    def put_many(self, items: dict[str, np.ndarray], store: Store = FLOAT32) -> None:
        """Store computed float32 vectors by key (as ``store`` packs them)."""
        if not items:
            return
        self._put_blobs(dict(zip(items, store.pack(np.stack(list(items.values()))), strict=True)), store)

    def _put_blobs(self, blobs: dict[str, bytes], store: Store) -> None:
        table = self._table(store)
        with self._transaction():
            self.con.executemany(f"INSERT OR IGNORE INTO {table} VALUES (?, ?)", blobs.items())

    def embed(
        self,
        texts: Sequence[str],
        embedder: _Encoder,
        progress: Callable[[int, int], None] | None = None,
        store: Store = FLOAT32,
        clock: Callable[[], float] = time.monotonic,
    ) -> tuple[np.ndarray, int, int]:
        """Vectors for ``texts`` (cached or computed; rows of ``store``'s form: float32 vectors by default), the
        number computed and the number reused.

        Each distinct text's row is written straight into one array as its blob is read or computed, then gathered
        once per text: no Python object per vector is kept (a dict of a million ``frombuffer`` arrays, their bytes
        and their keys took ≈ 1 KB per sentence — over 24 GB for the 9M sentences of a build adding 1M chunks).

        Texts are encoded in sub-batches sized to take about ``SubBatches.target_s`` each (``SubBatches``), and
        ``progress(done, todo)`` hears after each one: one big encode call said nothing for 88 s (issue 49), so a
        progress line every 10 s needs calls that end more often than that, whatever the texts' lengths and the
        machine's load. ``clock``: for tests."""
        width = store.width(self.dim)
        where: dict[str, int] = {}  # key -> its distinct row
        codes = np.fromiter(
            (where.setdefault(cache_key(embedder.model_id, t), len(where)) for t in texts), np.int64, len(texts)
        )
        rows: np.ndarray = np.empty((len(where), width), dtype=store.dtype)
        known = np.zeros(len(where), dtype=bool)
        table = self._table(store)
        for batch in _batches(list(where), _BATCH):
            marks = ",".join("?" * len(batch))
            for key, blob in self.con.execute(f"SELECT key, vector FROM {table} WHERE key IN ({marks})", batch):
                row = where[key]
                rows[row] = np.frombuffer(blob, dtype=store.dtype)
                known[row] = True
        first = np.full(len(where), -1, dtype=np.int64)  # a text of each distinct row: its first
        first[codes[::-1]] = np.arange(codes.size - 1, -1, -1)
        missing = np.flatnonzero(~known)
        keys = list(where)
        # Longest first, so each batch holds texts of similar length (little padding), as one big encode call would.
        todo = sorted(missing.tolist(), key=lambda row: len(texts[int(first[row])]), reverse=True)
        if progress and todo:
            progress(0, len(todo))
        sizes = SubBatches(clock=clock)  # each encode call a couple of seconds: progress moves whatever the texts
        start = 0
        while start < len(todo):
            part = todo[start : start + sizes.next()]
            began = sizes.clock()
            packed = store.pack(embedder.encode([texts[first[row]] for row in part]))
            sizes.took(len(part), sizes.clock() - began)
            self._put_blobs({keys[row]: blob for row, blob in zip(part, packed, strict=True)}, store)
            for row, blob in zip(part, packed, strict=True):
                rows[row] = np.frombuffer(blob, dtype=store.dtype)
            start += len(part)
            if progress:
                progress(start, len(todo))
        out = rows[codes] if len(texts) else np.zeros((0, width), dtype=store.dtype)
        return out, int(missing.size), len(texts) - int(missing.size)


@dataclass
class SubBatches:
    """How many texts the next encode call takes, so that each takes about ``target_s`` seconds: the rate of the
    calls so far decides (the first takes ``first`` texts), never more than ``most`` (a batch is a few seconds of
    CPU at that size, the size calls had before) nor fewer than one; a power of two, so calls take whole encoder
    batches once large. Texts come longest first, so a call's rate is a low estimate for the next."""

    target_s: float = 2.0
    first: int = 8
    most: int = 512
    clock: Callable[[], float] = time.monotonic
    _texts: int = 0
    _seconds: float = 0.0

    def next(self) -> int:
        if self._texts == 0:
            return self.first
        rate = self._texts / max(self._seconds, 1e-6)  # texts per second over the last calls
        want = max(1, min(self.most, int(rate * self.target_s)))
        return 1 << (want.bit_length() - 1)  # the power of two at or below

    def took(self, texts: int, seconds: float) -> None:
        """One call encoded ``texts`` in ``seconds``; the rate follows the latest calls (older ones fade)."""
        self._texts = int(self._texts / 2) + texts
        self._seconds = self._seconds / 2 + max(seconds, 0.0)


def _batches(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
