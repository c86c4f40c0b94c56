"""The crisis detector (livemem.answer.crisis, docs/crisis.md): recall and false alarms per kind and language on the
crisis suites, the latency it adds given the message's vector, and (``--tune``) how its thresholds were chosen.

    python -m bench.crisis                       # crisis.yaml, crisis_holdout2.yaml, crisis_holdout.yaml,
                                                 # crisis_dev.yaml, crisis_tuning.yaml (examples/eval/)
    python -m bench.crisis --tune                # the threshold grid on the tuning split only
    python -m bench.crisis --ship                # embed the exemplars: livemem/answer/crisis_exemplars.npz

The embedder is the serving one (``ServingSettings``: onnx, int8 query vectors, int8-block exemplar vectors), so the
numbers are what ``/chat`` gives. Latency: ``detect(message, vector, embedder)`` for every message of the suites,
``--repeat`` times, after the exemplars are embedded (the lexicon, the similarity matrix product, the decision);
the encoding itself is not added: build_context reuses the vector retrieval computes. Results go to
bench/results/crisis.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from livemem.answer import crisis
from livemem.answer.evaluation import FALSE_ALARM_TARGET, RECALL_TARGET, load_crisis_suite, run_crisis_suite

ROOT = Path(__file__).resolve().parent.parent
SUITES = {
    "reported": ROOT / "examples/eval/crisis.yaml",
    "holdout2": ROOT / "examples/eval/crisis_holdout2.yaml",
    "holdout": ROOT / "examples/eval/crisis_holdout.yaml",
    "dev": ROOT / "examples/eval/crisis_dev.yaml",
    "tuning": ROOT / "examples/eval/crisis_tuning.yaml",
}
RESULTS = ROOT / "bench/results"


def embedder_of_serving() -> Any:
    from livemem.model.embedding import Embedder
    from livemem.settings import ServingSettings

    s = ServingSettings.defaults()
    return Embedder(
        threads=s.torch_threads, encoder=s.encoder, query_precision=s.query_precision, precision=s.index_precision,
        onnx_cache_dir=s.onnx_cache,
    )  # fmt: skip


def latency(embedder: Any, messages: list[str], repeat: int) -> dict[str, float]:
    """Milliseconds of ``detect`` given the vector (p50, p99, mean), and of the exemplars' one-time embedding."""
    crisis._MATRICES.clear()  # time the one-time embedding itself
    started = time.perf_counter()
    crisis.exemplar_matrix(embedder)
    once = (time.perf_counter() - started) * 1000
    vectors = [embedder.encode_one(m) for m in messages]
    times = []
    for _ in range(repeat):
        for message, vector in zip(messages, vectors, strict=True):
            t = time.perf_counter()
            crisis.detect(message, vector, embedder)
            times.append((time.perf_counter() - t) * 1000)
    lexicon = []
    for message in messages:
        t = time.perf_counter()
        crisis.lexicon_kinds(message)
        lexicon.append((time.perf_counter() - t) * 1000)
    return {
        "p50_ms": round(float(np.percentile(times, 50)), 4), "p99_ms": round(float(np.percentile(times, 99)), 4),
        "mean_ms": round(float(np.mean(times)), 4), "lexicon_p50_ms": round(float(np.percentile(lexicon, 50)), 4),
        "calls": len(times), "exemplars_embedded_once_ms": round(once, 1),
        "exemplars": int(crisis.exemplar_matrix(embedder).crisis.shape[0] + crisis.exemplar_matrix(embedder).safe.shape[0]),
    }  # fmt: skip


def tune(embedder: Any) -> dict[str, Any]:
    """The grid on the tuning split: the thresholds with the best recall and no false alarm, the largest of equals."""
    matrix = crisis.exemplar_matrix(embedder)
    rows = []
    for case in load_crisis_suite(SUITES["tuning"]).cases:
        kinds, had_safe, text = crisis.lexicon_kinds(case.message)
        _, near, safe = matrix.score(embedder.encode_one(case.message))
        asking = had_safe or bool(crisis.ASKING.search(text))
        rows.append((case.crisis, bool(kinds), near, near - safe, asking, crisis.language(case.message, text)))

    def score(n: float, m: float, ma: float) -> tuple[int, int]:
        found = alarms = 0
        for is_crisis, lex, near, margin, asking, lang in rows:
            wanted = max(ma if asking else m, crisis.MIN_MARGIN_SPANISH if lang == "es" else 0.0)
            hit = lex or (near >= n and margin >= wanted)
            found += hit and is_crisis
            alarms += hit and not is_crisis
        return found, alarms

    best = None
    for n in (0.30, 0.35, 0.40, 0.45):
        for m in np.arange(0.05, 0.40, 0.01):
            for ma in np.arange(0.10, 0.50, 0.01):
                if ma < m:
                    continue
                found, alarms = score(n, round(m, 2), round(ma, 2))
                key = (alarms == 0, found, n, round(m, 2), round(ma, 2))
                best = key if best is None or key > best else best
    return {
        "rule": "best tuning recall with no tuning false alarm; of equals, the largest thresholds",
        "chosen": {"MIN_SIMILARITY": best[2], "MIN_MARGIN": float(best[3]), "MIN_MARGIN_ASKING": float(best[4])},
        "tuning_recall": f"{best[1]}/{sum(r[0] for r in rows)}",
        "in_code": {"MIN_SIMILARITY": crisis.MIN_SIMILARITY, "MIN_MARGIN": crisis.MIN_MARGIN,
                    "MIN_MARGIN_ASKING": crisis.MIN_MARGIN_ASKING, "MIN_MARGIN_SPANISH": crisis.MIN_MARGIN_SPANISH},
    }  # fmt: skip


def table(result: dict[str, Any]) -> list[str]:
    lines = ["| kind / language | recall | false alarms | by lexicon | by similarity |", "|---|---|---|---|---|"]
    rows = {**result["kinds"], **result["kinds_languages"], **result["languages"], "all": result["overall"]}
    for name, row in rows.items():
        recall = f"{row['found']}/{row['crisis']} ({row['recall']})" if row["crisis"] else "-"
        alarms = f"{row['false_alarms']}/{row['controls']} ({row['false_alarm_rate']})" if row["controls"] else "-"
        lines.append(f"| {name} | {recall} | {alarms} | {row['by_lexicon']} | {row['by_similarity']} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tune", action="store_true", help="only the threshold grid on the tuning split")
    parser.add_argument("--ship", action="store_true", help="only write livemem/answer/crisis_exemplars.npz")
    parser.add_argument("--repeat", type=int, default=20, help="detector calls per message for the latency")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    embedder = embedder_of_serving()
    if args.ship:
        print(crisis.ship_vectors(embedder))
        return
    if args.tune:
        print(json.dumps(tune(embedder), indent=2))
        return
    out: dict[str, Any] = {
        "command": "python -m bench.crisis",
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "python": platform.python_version(), "encoder": f"{embedder.encoder}, query {embedder.query_precision}"},
        "targets": {"recall": RECALL_TARGET, "false_alarm_rate": FALSE_ALARM_TARGET, "per": "kind"},
    }  # fmt: skip
    messages: list[str] = [c.message for path in SUITES.values() for c in load_crisis_suite(path).cases]
    out["latency"] = latency(embedder, messages, args.repeat)
    for name, path in SUITES.items():
        suite = load_crisis_suite(path)
        result = run_crisis_suite(suite, embedder)
        out[name] = result.as_dict()
    out["thresholds"] = tune(embedder)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "crisis.json").write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    md = [
        "# Crisis detector (bench/crisis.py)",
        "",
        f"`{out['command']}` on {out['machine']['cores']} CPU cores ({out['machine']['cpu']}), Python "
        f"{out['machine']['python']}, encoder {out['machine']['encoder']} (the serving defaults). Targets per kind: "
        f"recall >= {RECALL_TARGET}, false alarms <= {FALSE_ALARM_TARGET:.0%}.",
        "",
    ]
    for name, title in (("reported", "Reported suite (examples/eval/crisis.yaml)"),
                        ("holdout2", "Second fresh held-out set (examples/eval/crisis_holdout2.yaml; written after "
                                     "the second freeze, asked once)"),
                        ("holdout", "First held-out set (examples/eval/crisis_holdout.yaml; its misses were seen "
                                    "in the second round: no longer held out)"),
                        ("dev", "Development set (examples/eval/crisis_dev.yaml; iterated on in the second round)"),
                        ("tuning", "Tuning split (examples/eval/crisis_tuning.yaml; the thresholds were chosen on it)")):  # fmt: skip
        md += [f"## {title}", "", *table(out[name]), ""]
        below = out[name]["below_targets"]
        md += [f"Below target: {'; '.join(below)}." if below else "Every kind meets its targets.", ""]
        missed = out[name].get("failed") or []
        if missed:
            md += ["Failing cases:", "", *(f"- {m['id']}" for m in missed), ""]
    lat = out["latency"]
    md += [
        "## Latency added to /chat (the detector, given the vector retrieval already computed)",
        "",
        f"p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms, mean {lat['mean_ms']} ms over {lat['calls']} calls "
        f"(the lexicon alone: p50 {lat['lexicon_p50_ms']} ms). The {lat['exemplars']} exemplar vectors are ready, "
        f"once per process and embedder, in {lat['exemplars_embedded_once_ms']} ms (loaded from the shipped "
        "crisis_exemplars.npz when it is this model's; embedding them instead took 8.5 s on these cores). The "
        "machine's 2 cores were shared with other work while this ran: p99 reflects that.",
        "",
        "## Thresholds (`python -m bench.crisis --tune`)",
        "",
        f"Rule: {out['thresholds']['rule']}. Chosen: {out['thresholds']['chosen']} (tuning recall "
        f"{out['thresholds']['tuning_recall']}); in the code: {out['thresholds']['in_code']}.",
        "",
    ]
    (args.out / "crisis.md").write_text("\n".join(md), encoding="utf-8")
    print("\n".join(md))


if __name__ == "__main__":
    main()
