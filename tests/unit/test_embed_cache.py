"""The embedding cache (``livemem.model.embed_cache``): vectors by key in a SQLite B-tree, each key stored once, a cache
of the earlier DuckDB layout copied in once, and a build that embeds nothing new never encodes."""

from __future__ import annotations

import duckdb
import numpy as np

from livemem.model.embed_cache import CACHE_FILE, EmbeddingCache


class CountingEncoder:
    model_id = "test/counting"

    def __init__(self) -> None:
        self.calls: list[int] = []

    def encode(self, texts):
        self.calls.append(len(texts))
        return np.stack([np.full(4, float(len(t)), dtype=np.float32) for t in texts])


def test_texts_are_embedded_once_and_read_back_exactly(tmp_path) -> None:
    encoder = CountingEncoder()
    with EmbeddingCache(tmp_path, dim=4) as cache:
        vectors, computed, reused = cache.embed(["a", "bb", "a"], encoder)
        assert (computed, reused) == (2, 1) and encoder.calls == [2]
        assert vectors.tolist() == [[1.0] * 4, [2.0] * 4, [1.0] * 4]
    with EmbeddingCache(tmp_path, dim=4) as cache:  # another build: nothing recomputed
        vectors, computed, reused = cache.embed(["bb", "a", "ccc"], encoder)
        assert (computed, reused) == (1, 2) and encoder.calls == [2, 1]
        assert vectors[2].tolist() == [3.0] * 4
        cache.put_many({"k": np.ones(4, dtype=np.float32)})
        cache.put_many({"k": np.zeros(4, dtype=np.float32)})  # a key is stored once: the first vector stays
        assert cache.get_many(["k", "k", "missing"])["k"].tolist() == [1.0] * 4
        assert len(cache) == 4


def test_many_keys_are_looked_up_in_batches(tmp_path) -> None:
    items = {f"key-{i}": np.full(4, i, dtype=np.float32) for i in range(1_234)}
    with EmbeddingCache(tmp_path, dim=4) as cache:
        cache.put_many(items)
        found = cache.get_many([*items, "nope"])
    assert len(found) == 1_234 and found["key-1000"].tolist() == [1000.0] * 4


def test_a_cache_of_the_duckdb_layout_is_copied_in_once(tmp_path) -> None:
    old = duckdb.connect(str(tmp_path / "embeddings.duckdb"))
    old.execute("CREATE TABLE embeddings (key VARCHAR PRIMARY KEY, vector BLOB NOT NULL)")
    old.execute("INSERT INTO embeddings VALUES (?, ?)", ["old-key", np.arange(4, dtype=np.float32).tobytes()])
    old.close()
    with EmbeddingCache(tmp_path, dim=4) as cache:
        assert cache.get_many(["old-key"])["old-key"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert not (tmp_path / "embeddings.duckdb").exists() and (tmp_path / CACHE_FILE).exists()
