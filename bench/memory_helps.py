"""Does living memory help retrieval? Usage of half the SciFact train questions, replayed through the real API,
must improve the default ranking of the other half (issue 14).

1. The SciFact index of ``bench.serving_index`` (built once under ``bench/.work/serving``) is copied into a fresh
   index home, ``bench/.work/memory_helps/rag_index``: every run starts with no attention.
2. The train questions with judgements are split into halves A and B with a fixed seed.
3. **Day of use**: a real uvicorn process serves the index; each question of A is asked on ``/query``
   (``return: documents``, top 10, default settings) and ``/feedback useful=true`` is sent for the results the
   judgements mark relevant: only what the user was shown, with the signed trace id the answer carried.
4. **Night**: the real Dagster job ``attention_rollup_job`` rolls that day up (its partition, in process, with
   Dagster's clock set to the following night, when the nightly schedule would run it) and publishes attention.
5. **Evaluation**: a second uvicorn process, whose traces go to a scratch directory (measuring is not use), asks
   every question of B twice: default settings, and ``attention_boost: 0``. nDCG@10 for all of B, for B's
   questions with a relevant document confirmed in A, and for the others.
6. **Decay**: the job runs the next 7 days (no traces), evaluation again; then up to day 30, evaluation again.

    .venv/bin/python -m bench.memory_helps        # writes bench/results/memory_helps.json and .md
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import random
import shutil
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.serving_index import WORK as SCIFACT_WORK
from bench.serving_index import ensure_index
from bench.serving_latency import uvicorn_server
from bench.serving_quality import load_queries, ndcg_at
from livemem.query.signals import ATTENTION_HALF, PARENT_SHARE, QUESTION_SIMILARITY
from livemem.query.types import DEFAULT_ATTENTION_BOOST
from livemem.sources.config import PROJECT_ROOT
from livemem.version import parts_dir
from livemem.version.store import IndexHome

RESULTS = PROJECT_ROOT / "bench" / "results"
WORK = PROJECT_ROOT / "bench" / ".work" / "memory_helps"
DECAY_CHECKPOINTS = (7, 30)
NORMAL_DECAY = 0.02  # SciFact has no BREATH.md: tone normal
TARGET_GAIN = 0.03
TARGET_UNCONFIRMED = -0.005


def split(seed: int) -> tuple[list[str], list[str], dict[str, str], dict[str, dict[str, int]]]:
    queries, qrels = load_queries("train")
    ids = sorted(queries, key=int)
    random.Random(seed).shuffle(ids)
    half = len(ids) // 2
    return ids[:half], ids[half:], queries, qrels


def fresh_home(base: IndexHome, work: Path) -> IndexHome:
    """A new index home holding only the base version (no attention, no traces, no rollup state)."""
    shutil.rmtree(work, ignore_errors=True)
    home = IndexHome(work / "rag_index", cache_dir=base.cache_dir).ensure()
    version = base.current()
    shutil.copytree(base.version_dir(version), home.version_dir(version), symlinks=True)
    # the version's rows live in the home's shared segments (livemem.version): copy the ones it names
    manifest = json.loads((base.version_dir(version) / "manifest.json").read_text(encoding="utf-8"))
    for segment in manifest.get("segments") or []:
        source = parts_dir(base.version_dir(version)) / segment["id"]
        shutil.copytree(source, parts_dir(home.version_dir(version)) / segment["id"])
    home.rollback(version)  # points CURRENT at the copied version (it is published: a complete version dir)
    return home


def doc_of(result: dict[str, Any]) -> str:
    return Path(result["provenance"]["path"]).stem  # docs/<SciFact _id>.md


def replay_day(url: str, client: httpx.Client, ids: list[str], queries: dict, qrels: dict) -> dict[str, Any]:
    """Half A as usage: ask, then confirm only the relevant documents among those shown."""
    confirmed_docs: set[str] = set()
    feedback = shown_relevant = 0
    for qid in ids:
        answer = client.post(f"{url}/query", json={"query": queries[qid], "top_k": 10, "return": "documents"})
        answer.raise_for_status()
        body = answer.json()
        useful = [r for r in body["results"] if doc_of(r) in qrels[qid]]
        shown_relevant += bool(useful)
        if not useful:
            continue
        response = client.post(
            f"{url}/feedback",
            json={"trace_id": body["trace_id"], "chunk_ids": [r["chunk_id"] for r in useful], "useful": True},
        )
        response.raise_for_status()
        feedback += response.json()["recorded"]
        confirmed_docs |= {doc_of(r) for r in useful}
    return {
        "questions": len(ids),
        "questions_with_a_relevant_result": shown_relevant,
        "chunks_confirmed": feedback,
        "confirmed_docs": sorted(confirmed_docs),
    }


def rollup(sources: Path, home: IndexHome, days: list[date]) -> list[dict[str, Any]]:
    """Run ``attention_rollup_job`` for each day in order, as the nightly schedule would the night after it."""
    import dagster as dg

    from orchestration.definitions import build_definitions

    job = build_definitions(sources, home.root).resolve_job_def("attention_rollup_job")
    instance = dg.DagsterInstance.ephemeral()
    out = []
    for day in days:
        night = datetime.combine(day + timedelta(days=1), datetime.min.time(), tzinfo=UTC) + timedelta(hours=1)
        started = time.perf_counter()
        with dg.partition_loading_context(effective_dt=night):  # a future day's partition exists once it is past
            result = job.execute_in_process(instance=instance, partition_key=day.isoformat())
        if not result.success:
            raise RuntimeError(f"attention_rollup_job failed for {day}")
        out.append({"day": day.isoformat(), "version": home.current(), "s": round(time.perf_counter() - started, 2)})
    return out


def evaluate(url: str, client: httpx.Client, ids: list[str], queries: dict, qrels: dict, **options) -> dict:
    """nDCG@10 per question of ``ids``, through /query (documents, top 10)."""
    scores, versions, results = {}, set(), {}
    for qid in ids:
        answer = client.post(
            f"{url}/query", json={"query": queries[qid], "top_k": 10, "return": "documents", **options}
        )
        answer.raise_for_status()
        body = answer.json()
        versions.add(body["index_version"])
        scores[qid] = ndcg_at([doc_of(r) for r in body["results"]], qrels[qid], 10)
        results[qid] = {r["chunk_id"]: r["score"] for r in body["results"]}
    return {"per_question": scores, "versions": sorted(versions), "scores": results}


def multipliers(default: dict, off: dict) -> dict[tuple[str, str], float]:
    """(question, chunk) → the multiplier living memory applied: its score with the default settings / without."""
    out = {}
    for qid, scores in default["scores"].items():
        for chunk, score in scores.items():
            base = off["scores"][qid].get(chunk)
            if base:
                out[(qid, chunk)] = score / base
    return out


def fade(first: dict[tuple[str, str], float], later: dict[tuple[str, str], float], days: int) -> dict[str, Any]:
    """How the lifts of day 0 faded after ``days`` unused, against the documented pace: each lifted chunk's
    matched attention e (from m = 1 + b·e/(e + h)) decays to e·0.98^days, so m should become 1 + b·e'/(e' + h)."""
    b, h = DEFAULT_ATTENTION_BOOST, ATTENTION_HALF
    measured, predicted, errors = [], [], []
    for key, m0 in first.items():
        if m0 <= 1 + 1e-9 or key not in later:
            continue
        e = h * (m0 - 1) / (b - (m0 - 1))
        e_later = e * (1 - NORMAL_DECAY) ** days
        expected = 1 + b * e_later / (e_later + h)
        measured.append((later[key] - 1) / (m0 - 1))
        predicted.append((expected - 1) / (m0 - 1))
        errors.append(abs(later[key] - expected))
    return {
        "lifted_results": len(measured),
        "measured_lift_left": round(float(np.mean(measured)), 4) if measured else None,
        "predicted_lift_left": round(float(np.mean(predicted)), 4) if predicted else None,
        "max_multiplier_error": float(max(errors)) if errors else None,
    }


def compare(default: dict, off: dict, groups: dict[str, list[str]]) -> dict[str, Any]:
    out = {}
    for name, ids in groups.items():
        on = float(np.mean([default["per_question"][q] for q in ids])) if ids else 0.0
        base = float(np.mean([off["per_question"][q] for q in ids])) if ids else 0.0
        better = sum(default["per_question"][q] > off["per_question"][q] + 1e-12 for q in ids)
        worse = sum(default["per_question"][q] < off["per_question"][q] - 1e-12 for q in ids)
        out[name] = {
            "questions": len(ids),
            "default_ndcg@10": round(on, 4),
            "off_ndcg@10": round(base, 4),
            "gain": round(on - base, 4),
            "questions_better": better,
            "questions_worse": worse,
        }
    return out


def predicted_lift(attention: float, days: int) -> float:
    """The multiplier gain of a chunk with ``attention`` after ``days`` unused at the normal tone (per unit boost)."""
    e = attention * (1 - NORMAL_DECAY) ** days
    return e / (e + ATTENTION_HALF)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=14, help="seed of the A/B split")
    args = parser.parse_args()
    started = time.perf_counter()
    base = ensure_index()
    home = fresh_home(base, WORK)
    sources = SCIFACT_WORK / "sources.yaml"
    half_a, half_b, queries, qrels = split(args.seed)

    with (
        uvicorn_server(home.root, cache_size=0, workers=1, trace_dir=home.root) as url,
        httpx.Client(timeout=60) as client,
    ):
        day_start = datetime.now(UTC).date()
        usage = replay_day(url, client, half_a, queries, qrels)
        day_end = datetime.now(UTC).date()
    replay_s = time.perf_counter() - started
    use_days = [day_start + timedelta(days=i) for i in range((day_end - day_start).days + 1)]
    nights = rollup(sources, home, use_days)

    confirmed = set(usage["confirmed_docs"])
    groups = {
        "all_of_B": half_b,
        "B_with_a_confirmed_relevant_doc": [q for q in half_b if set(qrels[q]) & confirmed],
        "B_without": [q for q in half_b if not set(qrels[q]) & confirmed],
    }
    stages: list[dict[str, Any]] = []
    eval_dir = WORK / "evaluation"  # measuring is not use: its traces never reach the rollup
    with (
        uvicorn_server(home.root, cache_size=0, workers=1, trace_dir=eval_dir) as url,
        httpx.Client(timeout=60) as client,
    ):
        done = 0
        lifts: dict[tuple[str, str], float] = {}
        for days_unused in (0, *DECAY_CHECKPOINTS):
            if days_unused:
                empty = [use_days[-1] + timedelta(days=i) for i in range(done + 1, days_unused + 1)]
                nights += rollup(sources, home, empty)
                done = days_unused
            version = home.current()
            default = evaluate(url, client, half_b, queries, qrels)
            off = evaluate(url, client, half_b, queries, qrels, attention_boost=0)
            assert default["versions"] == off["versions"] == [version], (default["versions"], version)
            applied = multipliers(default, off)
            lifts = lifts or applied
            stages.append(
                {
                    "days_without_use": days_unused,
                    "index_version": version,
                    "predicted_lift_fraction": round(predicted_lift(1.0, days_unused) / predicted_lift(1.0, 0), 4),
                    "lift_fade": fade(lifts, applied, days_unused),
                    "largest_multiplier": round(max(applied.values(), default=1.0), 4),
                    **compare(default, off, groups),
                }
            )
            print(json.dumps(stages[-1]), flush=True)

    first = stages[0]
    report = {
        "command": f"python -m bench.memory_helps --seed {args.seed}",
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": _cpus()},
        "corpus": "SciFact (5,183 abstracts; train questions with judgements)",
        "seed": args.seed,
        "ranking": {
            "default_attention_boost": DEFAULT_ATTENTION_BOOST,
            "attention_half": ATTENTION_HALF,
            "parent_share": PARENT_SHARE,
            "formula": "score × (1 + boost · e / (e + half)); e = attention × Σ over the chunk's confirming questions of "
            "share × clip((cos(question, this one) − similarity) / (1 − similarity), 0, 1), plus parent_share × the "
            "same for the other chunks of its document",
            "question_similarity": QUESTION_SIMILARITY,
        },
        "half_A": {k: v for k, v in usage.items() if k != "confirmed_docs"} | {"docs_confirmed": len(confirmed)},
        "rollups": {"days": len(nights), "first": nights[0], "last": nights[-1]},
        "stages": stages,
        "targets": {
            "default_minus_off_all_B": {
                "target": f">= {TARGET_GAIN}",
                "value": first["all_of_B"]["gain"],
                "met": first["all_of_B"]["gain"] >= TARGET_GAIN,
            },
            "default_minus_off_B_without": {
                "target": f">= {TARGET_UNCONFIRMED}",
                "value": first["B_without"]["gain"],
                "met": first["B_without"]["gain"] >= TARGET_UNCONFIRMED,
            },
            "gain_fades": {
                "gain_by_days": {s["days_without_use"]: s["all_of_B"]["gain"] for s in stages},
                "predicted_lift_fraction": {s["days_without_use"]: s["predicted_lift_fraction"] for s in stages},
                "lift_fade": {s["days_without_use"]: s["lift_fade"] for s in stages},
                "met": all(a["all_of_B"]["gain"] >= b["all_of_B"]["gain"] for a, b in itertools.pairwise(stages))
                and all(
                    s["lift_fade"]["max_multiplier_error"] is None or s["lift_fade"]["max_multiplier_error"] < 1e-6
                    for s in stages
                ),
            },
        },
        "replay_s": round(replay_s, 1),
        "total_s": round(time.perf_counter() - started, 1),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "memory_helps.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    (RESULTS / "memory_helps.md").write_text(markdown(report), encoding="utf-8")
    print(json.dumps(report["targets"], indent=2))


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


def markdown(report: dict[str, Any]) -> str:
    a, ranking = report["half_A"], report["ranking"]
    lines = [
        "# Living memory helps retrieval (SciFact, through the API)",
        "",
        f"Command: `{report['command']}` — {report['machine']['platform']}, {report['machine']['cpus']} CPUs, "
        f"Python {report['machine']['python']}; {report['total_s']:.0f} s.",
        "",
        f"Half A ({a['questions']} questions) was asked on `/query` (documents, top 10) through a real uvicorn "
        f"process; `/feedback useful=true` was sent for the {a['chunks_confirmed']} relevant results shown "
        f"({a['questions_with_a_relevant_result']} questions had one; {a['docs_confirmed']} documents). "
        f"`attention_rollup_job` rolled the day up, then ran {report['rollups']['days'] - 1} empty days. "
        "Half B was asked with the default settings and with `attention_boost: 0` after each checkpoint.",
        "",
        f"Ranking: `{ranking['formula']}`, boost {ranking['default_attention_boost']}, half "
        f"{ranking['attention_half']}, similarity {ranking['question_similarity']}, parent share "
        f"{ranking['parent_share']}; decay 2 %/day (tone normal).",
        "",
        "| days without use | questions of B | n | default nDCG@10 | off nDCG@10 | gain | better / worse | "
        "predicted lift left |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for stage in report["stages"]:
        for group in ("all_of_B", "B_with_a_confirmed_relevant_doc", "B_without"):
            g = stage[group]
            lines.append(
                f"| {stage['days_without_use']} | {group} | {g['questions']} | {g['default_ndcg@10']:.4f} | "
                f"{g['off_ndcg@10']:.4f} | {g['gain']:+.4f} | {g['questions_better']} / {g['questions_worse']} | "
                f"{stage['predicted_lift_fraction']:.3f} |"
            )
    lines += [
        "",
        "How the lifts faded (results lifted on day 0, per question and chunk: multiplier m = default score / "
        "score with `attention_boost: 0`; documented: matched attention × 0.98 per unused day):",
        "",
        "| days without use | lifted results | largest m | lift left, measured | lift left, documented pace | "
        "max error of m |",
        "|---|---|---|---|---|---|",
    ]
    for stage in report["stages"]:
        f = stage["lift_fade"]
        error = "-" if f["max_multiplier_error"] is None else f"{f['max_multiplier_error']:.1e}"
        lines.append(
            f"| {stage['days_without_use']} | {f['lifted_results']} | {stage['largest_multiplier']:.3f} | "
            f"{f['measured_lift_left']} | {f['predicted_lift_left']} | {error} |"
        )
    t = report["targets"]
    lines += [
        "",
        "Targets (half B, right after the day of use):",
        f"- default ≥ off + {TARGET_GAIN}: {t['default_minus_off_all_B']['value']:+.4f} — "
        f"{'met' if t['default_minus_off_all_B']['met'] else 'NOT met'}",
        f"- questions with no confirmed document ≥ {TARGET_UNCONFIRMED}: {t['default_minus_off_B_without']['value']:+.4f}"
        f" — {'met' if t['default_minus_off_B_without']['met'] else 'NOT met'}",
        f"- the gain fades with decay: nDCG@10 gain by days without use {t['gain_fades']['gain_by_days']}, each "
        "lift exactly at the documented pace (table above) — "
        f"{'met' if t['gain_fades']['met'] else 'NOT met'}",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
