"""The result cache of /query (``livemem.query.cache``): least recently used out first, counted, 0 keeps nothing,
and safe to share between threads (docs/caches.md)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from livemem.query.cache import ResultCache, cache_key


def test_the_least_recently_used_entry_goes_first_and_every_lookup_is_counted() -> None:
    cache = ResultCache(2)
    cache.put("a", {"n": 1})
    cache.put("b", {"n": 2})
    assert cache.get("a") == {"n": 1}  # "a" is now the most recently used
    cache.put("c", {"n": 3})
    assert cache.get("b") is None and cache.get("a") == {"n": 1} and cache.get("c") == {"n": 3}
    assert (len(cache), cache.hits, cache.misses) == (2, 3, 1)
    cache.put("a", {"n": 4})  # a put replaces and refreshes
    cache.put("d", {"n": 5})
    assert cache.get("a") == {"n": 4} and cache.get("c") is None


def test_size_zero_keeps_nothing_but_counts_misses() -> None:
    cache = ResultCache(0)
    cache.put("a", {"n": 1})
    assert cache.get("a") is None and len(cache) == 0 and cache.misses == 1


def test_threads_share_one_cache() -> None:
    cache = ResultCache(64)

    def work(i: int) -> None:
        for j in range(200):
            key = f"{(i * 7 + j) % 100}"
            if cache.get(key) is None:
                cache.put(key, {"k": key})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(8)))
    assert len(cache) == 64 and cache.hits + cache.misses == 8 * 200


def test_the_key_folds_case_and_whitespace_and_names_the_version() -> None:
    key = cache_key(query="Food  Pantry", index_version="v1", model_id="m", role="public", top_k=5)
    assert key == cache_key(query=" food pantry ", index_version="v1", model_id="m", role="public", top_k=5)
    assert key != cache_key(query="food pantry", index_version="v2", model_id="m", role="public", top_k=5)
