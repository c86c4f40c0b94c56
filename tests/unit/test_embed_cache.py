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


def test_sentence_codes_are_cached_as_codes_in_their_own_table(tmp_path) -> None:
    """Sentence vectors are kept as int8 codes and a scale (``SENTENCE_CODES``): the same codes every time, computed
    once, a quarter of float32's bytes, and apart from the float32 vectors of the same texts."""
    import sqlite3

    from livemem.index.dense import quantize_int8
    from livemem.ingest.rechunk import embed_sentences

    encoder = CountingEncoder()
    encoder.dim = 4
    rows = [["one", "two"], [], ["three"]]
    first, computed, reused = embed_sentences(rows, tmp_path, encoder)
    assert (computed, reused) == (3, 0) and first.starts.tolist() == [0, 2, 2, 3]
    want = quantize_int8(encoder.encode(["one", "two", "three"]))
    np.testing.assert_array_equal(first.codes, want.codes)
    np.testing.assert_array_equal(first.scales, want.scales)
    again, computed, reused = embed_sentences([["three", "one"]], tmp_path, encoder)
    assert (computed, reused) == (0, 2)
    np.testing.assert_array_equal(again.codes, want.codes[[2, 0]])
    con = sqlite3.connect(tmp_path / CACHE_FILE)
    try:
        sizes = {len(blob) for (blob,) in con.execute("SELECT vector FROM sentence_codes")}
        floats = con.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0]
    finally:
        con.close()
    assert sizes == {4 + 4} and floats == 0
