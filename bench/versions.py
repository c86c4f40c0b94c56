"""Versions benchmark (issue 37): what asking an older version costs, and what a year of history costs on disk.

Run from the project root::

    .venv/bin/python -m bench.versions --sizes 25000                  # recorded in results/versions.{json,md}
    nice .venv/bin/python -m bench.versions --sizes 123000 --output bench/results/versions-123k.json

Built on ``bench/scale.py``: its corpus (SciFact cycled into one markdown file per abstract, one commit in a bare
git repository), its **stand-in embedder** (``StandInEmbedder``: a hash, never the model, so only the pipeline is
timed) and its phases. Per size (a target number of chunks), in a new index home:

1. **Three versions**: ``v1`` a full build, ``v2`` a one-file change (build + publish), ``v3`` an attention
   publish (``livemem.usage.attention.rollup_day`` over 200 trace events), as ``bench.scale`` makes them.
2. **Serving older versions**: a first process loads ``CURRENT`` (``v3``) once, writing the machine's serving
   copies (timed), and exits; then a fresh worker process (as a serving process would): ``load_snapshot`` of
   ``CURRENT``, then, while it is held, ``OpenVersions.get`` of ``v1`` (the target: at most 1 s at 123k
   chunks) and of ``v2``, and ``v1`` again (the LRU: no load). ``VmRSS`` after each: the memory each open older
   version costs (and ``RssAnon``: what is not mapped from the serving copies). Then ``--queries`` hybrid top-10 queries (SciFact train queries, vector given), each run on
   ``CURRENT`` and on ``v1`` in turn after 20 warm-up pairs: p50 / p99 of each, and older ÷ current (target ≤ 2).
3. **Diffs**: ``livemem.version.diff.diff_versions`` of ``v2 → v3`` (an attention publish) and ``v1 → v3``.
4. **A simulated year** (``--year-days``, default 365) in the same index home, starting the day after the last
   publish, retention ``{keep_last: 5, daily_days: 30, weekly_weeks: 52}``: every 7th day a one-file change (the
   same file as step 1 gets one more sentence, committed) is built and published at 02:00, and every night at
   03:00 an attention publish. The nightly publish is a **stand-in for the rollup** (which costs seconds at
   this size): a version derived from ``CURRENT`` exactly as the rollup derives one (``derive_version`` with the
   shared entries hard-linked) whose attention table gains 50 rows for chunks drawn at random (fixed seed) and
   never decays, so its table only grows: an upper bound on what kept versions' own tables cost. Each publish
   passes its simulated time, so retention by age prunes as it would over a year. At the end:
   ``livemem.version.history.disk_usage`` (``history_pct``: what keeping the older versions adds to what the
   current version alone needs; target < 10 % at 123k chunks), versions kept and pruned, publish times.

Results: ``--output`` (default ``bench/results/versions.json``) and the same path with ``.md``; the machine
facts, its load average and the exact command are in both. The targets are the issue's at 123,000 chunks; a
smaller size is reported against them for orientation only.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import random
import shlex
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from bench import scale
from bench.registry_bench import machine_facts

PROJECT_ROOT = scale.PROJECT_ROOT
DEFAULT_WORK = PROJECT_ROOT / "bench/.work/versions"
DEFAULT_OUTPUT = PROJECT_ROOT / "bench/results/versions.json"
RETENTION = {"keep_last": 5, "daily_days": 30, "weekly_weeks": 52}
YEAR_DAYS = 365
WEEKLY_EVERY = 7  # a one-file change every 7th day
NIGHTLY_ROWS = 50  # attention rows the stand-in nightly publish adds
YEAR_SEED = 7
TARGETS = {"open_older_s": 1.0, "older_over_current_p50": 2.0, "year_history_pct": 10.0, "at_chunks": 123_000}
log = logging.getLogger("bench.versions")


# --- the serving worker (a separate process) -------------------------------------------------------------------
def worker_main(argv: list[str]) -> None:
    """Open ``--current``, then each ``--older`` while it is held (``OpenVersions``), timing each and reading
    ``VmRSS``; then interleaved hybrid queries on the current and the first older version. Prints one JSON line."""
    parser = argparse.ArgumentParser(prog="bench.versions worker")
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--current", required=True)
    parser.add_argument("--older", nargs="+", required=True)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--queries-file", type=Path, default=scale.DEFAULT_QUERIES)
    args = parser.parse_args(argv)

    from threadpoolctl import threadpool_limits

    from livemem.engine.snapshot import load_snapshot
    from livemem.engine.versions import OpenVersions
    from livemem.query.retrieval import Retriever
    from livemem.query.types import Query
    from livemem.settings import EngineConfig
    from livemem.version.store import IndexHome

    threadpool_limits(1, user_api="blas")  # as the serving app sets (serving/state.py)
    import torch

    torch.set_num_threads(1)

    def rss_kib(key: str = "VmRSS") -> int:
        gc.collect()
        return scale.proc_kib("/proc/self/status", key) or 0

    home = IndexHome(args.home, engine=EngineConfig.from_env())
    report: dict[str, Any] = {"rss_start_kib": rss_kib()}
    t0 = time.perf_counter()
    current = load_snapshot(home, args.current)
    report["open_current"] = {"version": args.current, "s": round(time.perf_counter() - t0, 4), "chunks": current.size}
    report["rss_with_current_kib"] = rss_kib()
    report["anon_with_current_kib"] = rss_kib("RssAnon")
    older = OpenVersions(home, size=len(args.older))
    opens, rss, anon = [], report["rss_with_current_kib"], report["anon_with_current_kib"]
    for version in args.older:
        t0 = time.perf_counter()
        snap = older.get(version)
        elapsed = time.perf_counter() - t0
        now, now_anon = rss_kib(), rss_kib("RssAnon")
        opens.append({"version": version, "s": round(elapsed, 4), "chunks": snap.size, "rss_added_kib": now - rss,
                      "anon_added_kib": now_anon - anon})  # fmt: skip
        rss, anon = now, now_anon
    report["open_older"] = opens
    t0 = time.perf_counter()
    first_older = older.get(args.older[0])
    report["open_older_again_s"] = round(time.perf_counter() - t0, 6)
    report["older_loads"] = older.loads

    embedder = scale.StandInEmbedder()
    retriever = Retriever(embedder)
    texts = [q["text"] for q in scale.read_jsonl(args.queries_file)]
    wanted = [texts[i % len(texts)] for i in range(args.queries + scale.WARMUP_QUERIES)]
    vectors = embedder.encode(wanted)
    public = frozenset({"public"})
    sides = {"current": (current, current.collections_for(public)), "older": (first_older, first_older.collections_for(public))}  # fmt: skip
    samples: dict[str, list[float]] = {"current": [], "older": []}
    for i, (text, vector) in enumerate(zip(wanted, vectors, strict=True)):
        for name, (snap, collections) in sides.items():  # interleaved: the same load on both
            t0 = time.perf_counter()
            result = retriever.search(snap, Query(text=text, top_k=10, mode="hybrid"), collections, vector=vector)
            elapsed = time.perf_counter() - t0
            if len(result.chunks) != min(10, snap.size):
                raise RuntimeError(f"hybrid query on {name} returned {len(result.chunks)} chunks")
            if i >= scale.WARMUP_QUERIES:
                samples[name].append(elapsed)
    report["queries"] = {name: scale.percentiles_ms(s) for name, s in samples.items()}
    report["older_over_current_p50"] = round(
        report["queries"]["older"]["p50_ms"] / max(1e-9, report["queries"]["current"]["p50_ms"]), 3
    )
    report["vm_rss_kib"] = rss_kib()
    report["vm_hwm_kib"] = scale.proc_kib("/proc/self/status", "VmHWM")
    print(json.dumps(report), flush=True)


def prepare_main(argv: list[str]) -> None:
    """Load one version once and exit: the first load writes the machine's serving copies (as the first serving
    worker after a publish does), so the measuring worker's memory is not that of writing them."""
    from livemem.engine.snapshot import load_snapshot
    from livemem.settings import EngineConfig
    from livemem.version.store import IndexHome

    home, version = Path(argv[0]), argv[1]
    t0 = time.perf_counter()
    load_snapshot(IndexHome(home, engine=EngineConfig.from_env()), version)
    print(json.dumps({"s": round(time.perf_counter() - t0, 4)}), flush=True)


def _run(cmd: list[str]) -> dict[str, Any]:
    done = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd[1:4])} exited with status {done.returncode}:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def serving_worker(home_dir: Path, current: str, older: list[str], queries: int, queries_file: Path) -> dict[str, Any]:
    """The serving copies of ``current`` written by a first process (timed), then the measuring worker."""
    shutil.rmtree(home_dir / "cache" / "serving", ignore_errors=True)
    first = _run([sys.executable, "-m", "bench.versions", "prepare", str(home_dir), current])
    cmd = [sys.executable, "-m", "bench.versions", "worker", "--home", str(home_dir), "--current", current]
    cmd += ["--older", *older, "--queries", str(queries), "--queries-file", str(queries_file)]
    return {"first_open_writing_serving_copies_s": first["s"], **_run(cmd)}


# --- the simulated year ----------------------------------------------------------------------------------------
def nightly_publish(home, rnd: random.Random, chunk_ids: list[str], policy, now: datetime) -> tuple[str, list[str]]:
    """The stand-in nightly attention publish: a version derived from CURRENT as the rollup derives one, whose
    attention table gains ``NIGHTLY_ROWS`` rows; published at ``now``. Returns its id and the pruned versions."""
    from livemem.usage.attention import SHARED_ENTRIES
    from livemem.version import connect
    from livemem.version.store import derive_version, write_manifest

    with home.write_lock():
        version_id, staged, base = derive_version(home, link=SHARED_ENTRIES)
        con = connect(staged, read_only=False)
        try:
            rows = [(c, rnd.random()) for c in rnd.sample(chunk_ids, min(NIGHTLY_ROWS, len(chunk_ids)))]
            con.executemany("INSERT INTO attention VALUES (?, ?, NULL)", rows)
        finally:
            con.close()
        write_manifest(staged, {**home.manifest(base), "version_id": version_id, "base_version": base})
    return version_id, home.publish(version_id, base, policy, now=now)


def simulate_year(config, home, embedder, repo: Path, files: int, docs, days: int) -> dict[str, Any]:
    """``days`` nights of attention publishes and a one-file change every ``WEEKLY_EVERY``th day, under
    ``RETENTION``, each published at its simulated time (starting the day after the last publish)."""
    from livemem.ingest.build import build_version
    from livemem.sources.config import Retention
    from livemem.version import connect
    from livemem.version.history import disk_usage

    policy = Retention(**RETENTION)
    last = max(home.published_at(v) for v in home.published_versions())
    start = datetime.combine(last.astimezone(UTC).date() + timedelta(days=1), datetime.min.time(), UTC)
    with connect(home.version_dir(home.current())) as con:
        chunk_ids = [c for (c,) in con.execute("SELECT chunk_id FROM chunks ORDER BY chunk_id").fetchall()]
    rnd = random.Random(YEAR_SEED)
    before = {k: v for k, v in disk_usage(home).items() if k != "per_version_mb"}
    builds: list[float] = []
    nightly: list[float] = []
    pruned = published = 0
    out: dict[str, Any] = {"days": days, "retention": RETENTION, "start": start.isoformat(), "disk_before": before}
    with scale.phase(out):
        for day in range(days):
            midnight = start + timedelta(days=day)
            if day % WEEKLY_EVERY == WEEKLY_EVERY - 1:
                scale.commit_one_change(repo, files, docs)
                t0 = time.perf_counter()
                result = build_version(config, home, embedder)
                if result.version_id is None:
                    raise RuntimeError(f"day {day}: the weekly change built nothing: {result.reason}")
                pruned += len(home.publish(result.version_id, result.base_version, policy, now=midnight + timedelta(hours=2)))  # fmt: skip
                builds.append(time.perf_counter() - t0)
                published += 1
            t0 = time.perf_counter()
            _, gone = nightly_publish(home, rnd, chunk_ids, policy, midnight + timedelta(hours=3))
            nightly.append(time.perf_counter() - t0)
            pruned += len(gone)
            published += 1
    after = disk_usage(home)
    out.update(
        {
            "publishes": published,
            "weekly_changes": len(builds),
            "pruned": pruned,
            "kept": len(home.published_versions()),
            "build_publish_p50_s": round(float(np.median(builds)), 3) if builds else None,
            "nightly_publish_p50_s": round(float(np.median(nightly)), 3) if nightly else None,
            "disk": {k: v for k, v in after.items() if k != "per_version_mb"},
            "own_mb_newest": list(after["per_version_mb"].values())[-1] if after["per_version_mb"] else None,
        }
    )
    return out


# --- one size --------------------------------------------------------------------------------------------------
def run_size(
    target: int,
    work: Path,
    docs: list[dict[str, str]],
    queries: int = 200,
    queries_file: Path = scale.DEFAULT_QUERIES,
    year_days: int = YEAR_DAYS,
) -> dict[str, Any]:
    """Every measurement of one size; the core the smoke test runs too."""
    from livemem.sources.config import load_sources
    from livemem.version.diff import diff_versions
    from livemem.version.store import IndexHome

    files, expected_chunks = scale.files_for_chunks(docs, target)
    out: dict[str, Any] = {"target_chunks": target, "files": files, "expected_chunks": expected_chunks}
    repo, created = scale.ensure_repo(work, docs, files)
    out["repo"] = {"path": str(repo), "created": created, "head": scale.git(repo, "rev-parse", scale.BRANCH).strip()}
    size_dir = work / f"size-{target}"
    home_dir = size_dir / "index"
    shutil.rmtree(home_dir, ignore_errors=True)
    size_dir.mkdir(parents=True, exist_ok=True)
    sources = size_dir / "sources.yaml"
    sources.write_text(scale.sources_yaml(repo), encoding="utf-8")
    config = load_sources(sources)
    home = IndexHome(home_dir)
    embedder = scale.StandInEmbedder()

    v1 = scale.build_and_publish(config, home, embedder, out.setdefault("full_build", {}))
    out["chunks"] = out["full_build"]["total_chunks"]
    out["one_file_change"] = {"path": scale.commit_one_change(repo, files, docs)}
    v2 = scale.build_and_publish(config, home, embedder, out["one_file_change"])
    v3 = scale.attention_publish(home, v2, out.setdefault("attention_publish", {}))
    out["versions"] = {"v1_full_build": v1, "v2_one_file_change": v2, "v3_attention": v3}
    log.info("%d chunks: three versions in %.1f s", out["chunks"], out["full_build"]["total_s"])

    with scale.phase(out.setdefault("serving", {})) as entry:
        entry.update(serving_worker(home_dir, v3, [v1, v2], queries, queries_file))
    w = out["serving"]
    log.info("open older %.3f s, older/current p50 %.2f", w["open_older"][0]["s"], w["older_over_current_p50"])

    diffs = out["diffs"] = {}
    for name, (a, b) in {"attention_publish": (v2, v3), "one_file_change_and_attention": (v1, v3)}.items():
        t0 = time.perf_counter()
        diff = diff_versions(home, a, b)
        diffs[name] = {"s": round(time.perf_counter() - t0, 3), "summary": diff["summary"]}

    if year_days:
        out["year"] = simulate_year(config, home, embedder, repo, files, docs, year_days)
        log.info("year: history %s %% of current", out["year"]["disk"]["history_pct"])
    out["targets"] = judge(out)
    return out


def judge(size: dict[str, Any]) -> dict[str, Any]:
    """Each target, the figure measured against it and whether it is met (the targets are at 123k chunks)."""
    w = size["serving"]
    found = {
        "open_older_s": (max(o["s"] for o in w["open_older"]), TARGETS["open_older_s"]),
        "older_over_current_p50": (w["older_over_current_p50"], TARGETS["older_over_current_p50"]),
    }
    if "year" in size and size["year"]["disk"]["history_pct"] is not None:
        found["year_history_pct"] = (size["year"]["disk"]["history_pct"], TARGETS["year_history_pct"])
    out = {name: {"measured": m, "target": t, "met": m <= t if name != "year_history_pct" else m < t}
           for name, (m, t) in found.items()}  # fmt: skip
    out["at_target_size"] = size["chunks"] >= TARGETS["at_chunks"]
    return out


# --- report ----------------------------------------------------------------------------------------------------
def report_md(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        "# Versions benchmark (issue 37)",
        "",
        f"{results['label']}. Run {results['started_at']} on {m['cpu_model']} ({m['nproc']} cores, "
        f"{m['ram_gib']} GiB), Python {m['python']}; project {scale.project_line(results['project'])}; "
        f"load average at start {m['loadavg_at_start']}.",
        "",
        f"Command: `{results['command']}`",
        "",
        "Embedding: **STAND-IN** (`bench.scale.StandInEmbedder`), corpus and versions as `bench/scale.py` makes "
        "them: v1 a full build, v2 a one-file change, v3 an attention publish. Targets (issue 37) are at 123,000 "
        "chunks: open an older version ≤ 1 s, a query on it ≤ 2× one on `CURRENT`, a simulated year < 10 % extra "
        "disk.",
        "",
        "| chunks | open CURRENT in a fresh process: first (writes the serving copies) / next "
        "| open older while CURRENT held: v1 / v2 | again (LRU) | RSS: CURRENT / + v1 / + v2 (of which anonymous) | hybrid p50 / p99 current | older | older ÷ current (p50) "
        "| diff v2→v3 / v1→v3 |",
        "|" + "---|" * 9,
    ]
    for r in results["sizes"]:
        if "error" in r:
            lines.append(f"| {r['target_chunks']:,} (target) | failed: {r['error'].strip().splitlines()[-1]} |")
            continue
        w, q = r["serving"], r["serving"]["queries"]
        o1, o2 = w["open_older"][0], w["open_older"][-1]
        d = r["diffs"]
        lines.append(
            f"| {r['chunks']:,} | {w['first_open_writing_serving_copies_s']:.2f} s / {w['open_current']['s']:.2f} s "
            f"| **{o1['s']:.3f} s** / {o2['s']:.3f} s | {w['open_older_again_s'] * 1e3:.3f} ms "
            f"| {(w['rss_with_current_kib'] - w['rss_start_kib']) / 1024:,.0f} MiB / +{o1['rss_added_kib'] / 1024:,.1f} "
            f"({o1['anon_added_kib'] / 1024:,.1f}) / +{o2['rss_added_kib'] / 1024:,.1f} ({o2['anon_added_kib'] / 1024:,.1f}) MiB "
            f"| {q['current']['p50_ms']:.2f} / {q['current']['p99_ms']:.2f} ms "
            f"| {q['older']['p50_ms']:.2f} / {q['older']['p99_ms']:.2f} ms | **{w['older_over_current_p50']:.2f}** "
            f"| {d['attention_publish']['s']:.2f} / {d['one_file_change_and_attention']['s']:.2f} s |"
        )
    years = [r for r in results["sizes"] if "error" not in r and "year" in r]
    if years:
        lines += [
            "",
            "A simulated year: a nightly attention publish every day (stand-in: 50 attention rows more each night, "
            "never decaying) and a one-file change every 7th day, retention "
            f"`{json.dumps(RETENTION)}`, each published at its simulated time:",
            "",
            "| chunks | days | publishes | pruned | kept | build + publish p50 | nightly publish p50 "
            "| kept versions' own dirs | segments | current alone | **history (extra)** | wall |",
            "|" + "---|" * 12,
        ]
        for r in years:
            y, d = r["year"], r["year"]["disk"]
            lines.append(
                f"| {r['chunks']:,} | {y['days']} | {y['publishes']} | {y['pruned']} | {y['kept']} "
                f"| {y['build_publish_p50_s']} s | {y['nightly_publish_p50_s']} s | {d['versions_mb']:.1f} MB "
                f"| {d['segments_mb']:.1f} MB ({d['segments']}) | {d['current_mb']:.1f} MB "
                f"| **{d['history_mb']:.1f} MB = {d['history_pct']} %** | {y['wall_s']:.0f} s |"
            )
    lines += ["", "Targets (measured against the issue's, which are set at 123,000 chunks):", ""]
    lines += ["| chunks | target | measured | limit | met |", "|---|---|---|---|---|"]
    for r in results["sizes"]:
        if "error" in r:
            continue
        for name, t in r["targets"].items():
            if isinstance(t, dict):
                note = "" if r["targets"]["at_target_size"] else " (below the target size)"
                lines.append(f"| {r['chunks']:,} | {name} | {t['measured']} | {t['target']} | {'yes' if t['met'] else 'no'}{note} |")  # fmt: skip
    lines += [
        "",
        "Open: `OpenVersions.get` (what a request naming `version` / `as_of` does the first time) in a worker that "
        "already holds `CURRENT`; the segments the versions share come from the process' segment cache and the "
        "serving copies. RSS: the worker's `VmRSS` after `gc.collect()`, before and after each open. Queries: the "
        "same text and vector on `CURRENT` and on v1 in turn. History: what the kept non-current versions' own "
        "directories and the segments only they hold add to what `CURRENT` alone needs "
        "(`livemem.version.history.disk_usage`).",
        "",
    ]
    return "\n".join(lines)


def project_state() -> dict[str, Any]:
    """The project commit benchmarked and the files of ``livemem/`` changed in its working tree (as
    ``bench.scale.project_state``, whose first path loses its first letter to a ``strip``)."""

    def run_git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True)
        return done.stdout if done.returncode == 0 else ""

    changed = [line[3:] for line in run_git("status", "--porcelain", "--", "livemem").splitlines() if line.strip()]
    return {"commit": run_git("rev-parse", "HEAD").strip(), "livemem_modified": changed, "root": str(PROJECT_ROOT)}


def command_line(argv: list[str]) -> str:
    python = Path(sys.executable)
    shown = python.relative_to(PROJECT_ROOT).as_posix() if python.is_relative_to(PROJECT_ROOT) else str(python)
    return shlex.join([shown, "-m", "bench.versions", *argv])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        worker_main(argv[1:])
        return 0
    if argv[:1] == ["prepare"]:
        prepare_main(argv[1:])
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.versions", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="25000", help="target chunk counts, comma-separated")
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK, help="generated repositories and index homes")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--corpus", type=Path, default=scale.DEFAULT_CORPUS)
    parser.add_argument("--queries-file", type=Path, default=scale.DEFAULT_QUERIES)
    parser.add_argument("--queries", type=int, default=200, help="timed hybrid queries per side and size")
    parser.add_argument("--year-days", type=int, default=YEAR_DAYS, help="days of the simulated year (0: none)")
    parser.add_argument("--label", default="shared machine", help="what the numbers are (shown in the report)")
    parser.add_argument("--allow-huge", action="store_true", help=f"allow sizes of {scale.HUGE:,} chunks and more")
    parser.add_argument("--report-only", action="store_true", help="rewrite the Markdown from --output's JSON")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(asctime)s %(message)s")
    log.setLevel(logging.INFO)
    if args.report_only:
        results = json.loads(args.output.read_text(encoding="utf-8"))
        args.output.with_suffix(".md").write_text(report_md(results), encoding="utf-8")
        return 0
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if any(s >= scale.HUGE for s in sizes) and not args.allow_huge:
        parser.error(f"sizes of {scale.HUGE:,} chunks or more take hours and tens of GB: add --allow-huge")
    if args.year_days < 0:
        parser.error("--year-days: 0 or more")
    docs = scale.read_jsonl(args.corpus)
    results: dict[str, Any] = {
        "label": args.label,
        "command": command_line(argv),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "project": project_state(),
        "embedder": {
            "stand_in": True,
            "class": "bench.scale.StandInEmbedder",
            "model_id": scale.StandInEmbedder.model_id,
        },
        "machine": {**machine_facts(), "loadavg_at_start": scale._load()},
        "targets": TARGETS,
        "sizes": [],
    }

    def measure(target: int) -> dict[str, Any]:
        return run_size(target, args.work, docs, args.queries, args.queries_file, args.year_days)

    return scale.measure_sizes(sizes, measure, results, args.output, report_md)


if __name__ == "__main__":
    sys.exit(main())
