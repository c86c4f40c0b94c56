"""Where a serving worker's version switch spends its time (issue 38: a switch at 2M chunks within 1 s).

A worker switches when ``CURRENT`` moves: ``livemem.engine.snapshot.load_snapshot(home, new)`` while it still holds
the snapshot of the old version (``bench.scale``'s serving phase times exactly that). This loads the oldest version
of a home (the full build) once, then, ``--repeats`` times, loads each next version while holding it, as a fresh
worker would: the segments the next version adds are forgotten by the process between repeats (so each repeat maps
them again and derives their columns again), the big segment stays loaded by the held snapshot. Prints the wall time
of every switch and, after it, of reading every column of the new snapshot once (what its first requests read:
``Snapshot.columns`` are gathered at first use) or, with ``--queries N``, of N hybrid queries on it, then one more
switch under ``cProfile``: its stages (the functions of ``load_snapshot``) and the functions with the most own
time.

    .venv/bin/python -m bench.switch_profile --home /tmp/scalework/size-1000000/index

Nothing under the home is written: a version whose segments have no serving copy yet (which loading would write)
is refused, and the oldest version's copy must exist too (its first load is then a mapping, ≈ 2 s at 1M).
A 1M snapshot takes ≈ 6 GB of memory.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

# the functions whose cumulative time is reported as stages of a switch (``load_snapshot`` and what it calls)
STAGES = (
    ("load_snapshot_at", "snapshot.py"),
    ("verify_files", "snapshot.py"),
    ("connect", "version/__init__.py"),
    ("get", "segments.py"),
    ("retain", "segments.py"),
    ("_prune_copies", "snapshot.py"),
    ("_segment_columns", "snapshot.py"),
    ("segment_rows", "snapshot.py"),
    ("__init__", "dense.py"),
    ("prepare", "dense.py"),
    ("repeated", "snapshot.py"),
    ("read_signals", "signals.py"),
    ("_related", "signals.py"),
    ("__init__", "sparse.py"),
    ("__init__", "snapshot.py"),
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, required=True, help="an index home (its versions/ and parts/)")
    parser.add_argument("--base", help="the version held (default: the oldest)")
    parser.add_argument("--to", nargs="+", help="the versions switched to (default: the one after the base)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--top", type=int, default=25, help="functions listed by own time under cProfile")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument(
        "--queries",
        type=int,
        default=0,
        help="after each switch, this many hybrid top-10 queries on the new snapshot (stand-in vectors given, as "
        "bench.scale; the first reads what the snapshot gathers at first use) instead of reading every column",
    )
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)

    from livemem.engine.snapshot import SEGMENTS, load_snapshot
    from livemem.settings import EngineConfig
    from livemem.version import mapped, parts_dir
    from livemem.version.store import IndexHome

    home = IndexHome(args.home, engine=EngineConfig.from_env())
    ask = _queries(args.queries) if args.queries else None
    versions = sorted(p.name for p in (args.home / "versions").iterdir() if (p / "manifest.json").is_file())
    base = args.base or versions[0]
    targets = args.to or [versions[versions.index(base) + 1]]
    for version in (base, *targets):  # loading a segment without a serving copy would write one under the home
        path = home.version_dir(version)
        manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
        root = mapped.cache_root(parts_dir(path), home.engine.serving_cache)
        missing = [s["id"] for s in manifest.get("segments") or [] if not (root / s["id"]).is_dir()]
        if missing:
            sys.exit(
                f"version {version}: no serving copy of {', '.join(missing)} under {root} (loading would write it)"
            )

    print(f"load average {tuple(round(x, 2) for x in os.getloadavg())}; base {base}; switching to {', '.join(targets)}")
    t0 = time.perf_counter()
    held = load_snapshot(home, base)
    print(f"base load: {time.perf_counter() - t0:.2f} s, {held.size:,} chunks, {_rss_mib():,} MiB RSS")
    parts = parts_dir(held.path)
    if ask is not None:  # the held version answers first, as a serving worker's does before CURRENT moves
        ask(held)

    def switch(version: str, profiler: cProfile.Profile | None = None) -> tuple[float, int]:
        gc.collect()
        t0 = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        fresh = load_snapshot(home, version)
        if profiler is not None:
            profiler.disable()
        elapsed = time.perf_counter() - t0
        size = fresh.size
        if ask is not None:
            queried.append(ask(fresh))
        else:
            t0 = time.perf_counter()
            for name in fresh.columns:  # what a snapshot's first requests read (gathered at first use, if not at load)
                fresh.columns[name]
            columns.append(time.perf_counter() - t0)
        fresh.close()
        del fresh
        gc.collect()
        SEGMENTS.retain(parts, set(held.segments))  # the next repeat maps the segments the version adds again
        return elapsed, size

    results = {}
    columns: list[float] = []
    queried: list[list[float]] = []
    for version in targets:
        times = []
        columns.clear()
        queried.clear()
        for _ in range(args.repeats):
            elapsed, size = switch(version)
            times.append(elapsed)
        results[version] = {"chunks": size, "s": [round(t, 4) for t in times]}
        print(
            f"switch to {version} ({size:,} chunks): min {min(times):.3f} s, median {statistics.median(times):.3f} s"
            f" ({', '.join(f'{t:.3f}' for t in times)})"
        )
        if columns:
            results[version]["every_column_after_s"] = [round(t, 4) for t in columns]
            print(f"  then every column read once: median {statistics.median(columns):.3f} s")
        if queried:
            first = [q[0] for q in queried]
            rest = [statistics.median(q[1:]) for q in queried if len(q) > 1]
            results[version]["first_query_ms"] = [round(t * 1000, 2) for t in first]
            results[version]["later_queries_p50_ms"] = [round(t * 1000, 2) for t in rest]
            print(
                f"  then hybrid queries: the first {', '.join(f'{t * 1000:.1f}' for t in first)} ms; "
                f"p50 of the rest {', '.join(f'{t * 1000:.1f}' for t in rest)} ms; switch + first query: median "
                f"{statistics.median(a + b for a, b in zip(times, first, strict=True)):.3f} s"
            )
    print(f"RSS {_rss_mib():,} MiB; load average {tuple(round(x, 2) for x in os.getloadavg())}")
    if not args.no_profile:
        profiler = cProfile.Profile()
        elapsed, _ = switch(targets[0], profiler)
        stats = pstats.Stats(profiler)
        print(f"\nunder cProfile: {elapsed:.3f} s; stages (cumulative s, calls):")
        entries = stats.stats  # type: ignore[attr-defined]
        stages = {}
        for name, where in STAGES:
            found = [(v[3], v[1]) for (file, _, func), v in entries.items() if func == name and file.endswith(where)]
            if found:
                stages[f"{where}:{name}"] = round(sum(c for c, _ in found), 4)
                print(f"  {where}:{name:<20} {sum(c for c, _ in found):8.3f}  {sum(n for _, n in found):>8}")
        results["profile"] = {"wall_s": round(elapsed, 4), "stages_s": stages}
        print(f"\nfunctions by own time (top {args.top}):")
        stats.sort_stats("tottime").print_stats(args.top)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


def _queries(count: int):
    """A function timing ``count`` hybrid top-10 queries on a snapshot (the public collections, stand-in vectors
    given, one BLAS and torch thread as serving sets), in seconds each."""
    import torch
    from threadpoolctl import threadpool_limits

    from bench.scale import StandInEmbedder
    from livemem.query.retrieval import Retriever
    from livemem.query.types import Query

    threadpool_limits(1, user_api="blas")
    torch.set_num_threads(1)
    embedder = StandInEmbedder()
    retriever = Retriever(embedder)
    words = ("heating help in winter", "protein folding", "vaccine efficacy trial", "gene expression in cancer")
    texts = [words[i % len(words)] for i in range(count)]
    vectors = embedder.encode(texts)

    def ask(snap) -> list[float]:
        collections = snap.collections_for(frozenset({"public"}))
        took = []
        for text, vector in zip(texts, vectors, strict=True):
            t0 = time.perf_counter()
            retriever.search(snap, Query(text=text, top_k=10, mode="hybrid"), collections, vector=vector)
            took.append(time.perf_counter() - t0)
        return took

    return ask


def _rss_mib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    return 0


if __name__ == "__main__":
    main()
