"""A 211's HSDS export published as the registry of a Florida deployment, and residents' questions about its area
answered from it, end to end (issue 46: "the registry published, residents' questions about its area answered").

    HF_HUB_OFFLINE=1 .venv/bin/python -m bench.registry_answers [--services 4000] [--seed 7] [--undated unverified_shown]

1. ``tests/support/hsds211.write_package`` writes an HSDS 1.0 package of ``--services`` services (Florida, with
   GA/AL border rows, statewide lines, messy phones, undated rows).
2. A sources file is written beside it: ``home: {states: [FL], name: Florida 211}``, ``registry: {kind: hsds,
   path: <package>, states: [FL], undated: <--undated>}`` and a one-page corpus in a git repository of its own.
3. The Dagster jobs ``build_index`` and ``verify_registry`` run in process (as ``tests/support/context.py``).
4. Residents' questions are generated from the imported rows (``resident_cases``): a need in a ZIP, a need in a
   town, "<county> County shelter", a misspelt county, "Dade", lower case, places outside Florida (a redirect
   naming Florida), a program whose phone is answered 24 hours, a DCF ACCESS office; each expectation is the TRUE
   answer from the generated data. They are asked through ``/chat``'s code path (``SnapshotAsker``, the extractive
   backend) and checked by ``run_suite``.

Results: ``bench/results/registry_answers.json`` and a section of ``bench/results/registry_import.md``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.hsds211 import write_package

WORK = Path("bench/.work/registry_answers")
RESULTS = Path("bench/results")
MARK_BEGIN = "<!-- registry_answers: begin -->"
MARK_END = "<!-- registry_answers: end -->"

# how a resident asks for each need (the registry type a first program must have)
NEED_WORDS = {
    "food_pantry": "food pantry",
    "housing": "shelter",
    "utility_assistance": "help paying my electric bill",
    "snap": "food stamps",
    "healthcare": "free clinic",
    "legal_aid": "legal aid",
    "wic": "WIC",
}
# the needs named more narrowly than a registry type, by the AIRS term names that answer them
ASKED_AS = {
    "shelter": ("Homeless Shelter",),
    "clinic": ("Community Clinics",),
    "pantry": ("Food Pantries", "Ongoing Emergency Food Assistance"),
}
TYPO = {  # a misspelling people write -> the county
    "Hillsborough": "Hillsbourough",
    "Pinellas": "Pinelas",
    "Duval": "Duvall",
    "Broward": "Browad",
    "Orange": "Ornge",
    "Palm Beach": "Plam Beach",
    "Escambia": "Escambria",
    "Volusia": "Volousia",
}


def write_deployment(
    root: Path, package: Path, *, undated: str = "unverified_shown", name: str = "Florida 211"
) -> Path:
    """A sources file for a Florida deployment whose registry is the HSDS package ``package`` (and the one-page
    corpus a sources file needs, in a git repository with a commit); returns the sources file."""
    from support.git import GitRepo

    repo = GitRepo(root / "corpus")
    repo.commit(
        {"guides/florida.md": "# Florida help\n\nCall 211 for food, shelter and bill help anywhere in Florida.\n"},
        message="corpus",
    )
    sources = root / "sources.yaml"
    sources.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "home": {"states": ["FL"], "name": name},
                "registry": {"kind": "hsds", "path": str(package.resolve()), "states": ["FL"], "undated": undated},
                "sources": [
                    {
                        "name": "fl-guides",
                        "repo": str(repo.path.resolve()),
                        "include": ["**/*.md"],
                        "collection": "fl_guides",
                    }
                ],
            },
            sort_keys=False,
        ),
        encoding="utf-8",
    )
    return sources


def build(sources: Path, index_dir: Path) -> dict[str, float]:
    """build_index, then verify_registry, in process; the seconds each took."""
    from dagster import DagsterInstance

    from orchestration.definitions import build_definitions

    defs = build_definitions(sources, index_dir)
    instance = DagsterInstance.ephemeral()
    seconds = {}
    for job in ("build_index", "verify_registry"):
        t0 = time.perf_counter()
        assert defs.resolve_job_def(job).execute_in_process(instance=instance).success, job
        seconds[job] = round(time.perf_counter() - t0, 1)
    return seconds


def published_rows(index_dir: Path) -> list[dict[str, Any]]:
    """The registry rows the current version publishes (its ``registry`` table; phones decoded)."""
    import duckdb

    from livemem.version.store import IndexHome

    home = IndexHome(index_dir)
    con = duckdb.connect(str(index_dir / "versions" / home.current() / "tables.duckdb"), read_only=True)
    try:
        cursor = con.execute("SELECT * FROM registry ORDER BY source_row")
        names = [d[0] for d in cursor.description]
        rows = [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]
    finally:
        con.close()
    for row in rows:
        row["phones"] = json.loads(row["phones"]) if row.get("phones") else []
    return rows


def _asked_as(row: dict[str, Any]) -> list[str]:
    """The narrower needs a resident names that the row's first taxonomy term is ("shelter": a Homeless Shelter
    is housing, but rent help is housing too)."""
    terms = json.loads(row["taxonomy_terms"]) if isinstance(row.get("taxonomy_terms"), str) else []
    first = (terms[0].get("name") or "") if terms else ""
    return [need for need, names in ASKED_AS.items() if first in names]


def _town(row: dict[str, Any]) -> str | None:
    match = re.search(r",\s*([^,]+),\s*[A-Z]{2}\s+\d{5}", row.get("address") or "")
    return match.group(1).strip() if match else None


def resident_cases(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Residents' questions about the package's area, each with the TRUE answer the published rows give: the
    county (and state) a place is in, the type of the first program, the program itself where only one fits."""
    fl = [r for r in rows if r.get("state") == "FL" and r.get("county") and r.get("zip")]
    by_zip_type: dict[tuple[str, str], list[dict]] = defaultdict(list)
    by_town_type: dict[tuple[str, str], list[dict]] = defaultdict(list)
    by_county_type: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in fl:  # by the need the program is filed under first (its primary type and first taxonomy term)
        for kind in {r["resource_type"], *_asked_as(r)}:
            by_zip_type[(r["zip"], kind)].append(r)
            by_county_type[(r["county"], kind)].append(r)
            if _town(r):
                by_town_type[(_town(r), kind)].append(r)
    town_counties: dict[str, set[str]] = defaultdict(set)
    for r in fl:
        if _town(r):
            town_counties[_town(r)].add(r["county"])
    cases: list[dict[str, Any]] = []

    def add(cid: str, category: str, question: str, **expect: Any) -> None:
        cases.append({"id": cid, "category": category, "question": question, "expect": expect})

    # a need in a ZIP where exactly one program of that type is: that program first
    for kind, words in (("pantry", "food pantry"), ("shelter", "shelter"), ("utility_assistance",
                        "help paying my electric bill"), ("clinic", "free clinic")):  # fmt: skip
        # ZIPs where exactly one program answers the need, and no other program of its registry type is
        wide = {"pantry": "food_pantry", "shelter": "housing", "clinic": "healthcare"}.get(kind, kind)
        only = sorted(
            (z, rs[0]) for (z, k), rs in by_zip_type.items()
            if k == kind and len(rs) == 1 and len(by_zip_type[(z, wide)]) == 1
        )  # fmt: skip
        for zip5, row in only[:2]:
            add(f"zip-{zip5}-{kind}", "zip", f"{words} near {zip5}", county=row["county"], state="FL",
                home_scope=True, response_class="answer", first_program=row["local_resource_id"],
                answer_not_contains=["West Virginia"])  # fmt: skip
    # a need in a town (one county only): a program of that type first, in the town's county
    size = Counter(_town(r) for r in fl)  # the towns with the most programs first (the ones people ask about)
    towns = sorted(
        ((t, k) for (t, k), rs in by_town_type.items()
         if len(town_counties[t]) == 1 and k in NEED_WORDS and len(rs) >= 2),
        key=lambda tk: (-size[tk[0]], tk),
    )  # fmt: skip
    seen_kinds: Counter[str] = Counter()
    used: set[str] = set()
    for town, kind in towns:  # each need in another town
        if seen_kinds[kind] >= 1 or kind == "wic" or town in used:
            continue
        seen_kinds[kind] += 1
        used.add(town)
        county = next(iter(town_counties[town]))
        add(f"town-{town.lower().replace(' ', '-')}-{kind}", "town", f"{NEED_WORDS[kind]} in {town}", county=county,
            response_class="answer", first_program=kind)  # fmt: skip
    # "<County> County shelter"
    for county in ("Hillsborough", "Duval", "Pinellas"):
        if by_county_type.get((county, "housing")):
            add(f"county-{county.lower()}-shelter", "county", f"{county} County shelter", county=county,
                response_class="answer", first_program="housing")  # fmt: skip
    # a misspelt county
    for county, typo in TYPO.items():
        if by_county_type.get((county, "food_pantry")) and sum(c["category"] == "typo" for c in cases) < 3:
            add(f"typo-{county.lower().replace(' ', '-')}", "typo", f"food bank in {typo} County", county=county,
                first_program="food_pantry")  # fmt: skip
    # Dade: Miami-Dade's old name; the DCF ACCESS offices are there
    if by_county_type.get(("Miami-Dade", "snap")):
        add("county-dade-snap", "county", "food stamps office in Dade", county="Miami-Dade", first_program="snap",
            response_class="answer")  # fmt: skip
    dcf = sorted(
        (r for r in fl if r.get("organization") == "Florida DCF ACCESS" and _town(r)), key=lambda r: int(r["source_id"])
    )
    if dcf:
        add("dcf-office-organization", "organization", f"where do I apply for SNAP in {_town(dcf[0])}?",
            county=dcf[0]["county"], first_program="snap", answer_contains=["Florida DCF ACCESS"])  # fmt: skip
    # lower case
    lower = sorted(
        ((t, k) for (t, k), rs in by_town_type.items() if len(town_counties[t]) == 1 and k == "food_pantry"),
        key=lambda tk: (-size[tk[0]], tk),
    )
    for town, kind in lower[5:7]:
        add(f"lower-{town.lower().replace(' ', '-')}", "lower_case", f"{NEED_WORDS[kind]} in {town.lower()}",
            county=next(iter(town_counties[town])), first_program=kind)  # fmt: skip
    # a phone answered 24 hours: a shelter in a county where one is
    hours24 = sorted(
        (r for r in fl if "housing" in (r.get("resource_types") or [])
         and any("24" in str(p.get("note") or "") for p in r.get("phones") or [])),
        key=lambda r: int(r["source_id"]),
    )  # fmt: skip
    picked = 0
    for row in hours24:  # the only housing program of its ZIP: it is the answer, its phone line says "24 hrs"
        if len(by_zip_type[(row["zip"], "housing")]) == 1 and picked < 2:
            picked += 1
            add(f"hours24-{row['zip']}", "phone_note", f"24 hour shelter near {row['zip']}", county=row["county"],
                first_program=row["local_resource_id"], answer_contains=["24 hrs"])  # fmt: skip
    # places outside Florida: a redirect naming Florida
    for cid, question, state in (
        ("out-atlanta", "food bank in Atlanta GA", "GA"),
        ("out-thomasville", "shelter in Thomasville, Georgia", "GA"),
        ("out-dothan", "help paying rent in Dothan, AL", "AL"),
        ("out-zip-30303", "SNAP office near 30303", "GA"),
    ):
        add(cid, "out_of_state", question, state=state, response_class="redirect",
            answer_contains=["outside Florida"])  # fmt: skip
    return cases


def write_suite(cases: list[dict[str, Any]], path: Path) -> Path:
    suite = {"version": 1, "name": "generated-florida-211", "description": "bench/registry_answers.py", "cases": cases}
    path.write_text(yaml.safe_dump(suite, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def ask(index_dir: Path, suite_path: Path) -> Any:
    from livemem.answer.evaluation import SnapshotAsker, load_suite, retriever_for, run_suite
    from livemem.engine.snapshot import load_snapshot
    from livemem.model.embedding import Embedder
    from livemem.settings import ContextSettings, EngineConfig, ServingSettings
    from livemem.version.store import IndexHome

    home = IndexHome(index_dir, engine=EngineConfig.from_env())
    snap = load_snapshot(home, home.current())
    serving = ServingSettings.defaults()
    try:
        asker = SnapshotAsker(snap, retriever_for(serving, Embedder(threads=2)), ContextSettings(warm_up=False))
        return run_suite(load_suite(suite_path), asker, home.current())
    finally:
        snap.close()


def write_results(data: dict[str, Any], command: str) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "registry_answers.json").write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
    lines = [
        MARK_BEGIN,
        "## Residents' questions answered from the published registry",
        "",
        f"Command: `{command}`",
        "",
        f"An HSDS {data['version']} package of {data['services']} services (seed {data['seed']}) is the registry "
        f"(`registry: {{kind: hsds, states: [FL], undated: {data['undated']}}}`) of a deployment whose home is "
        "Florida (`home: {states: [FL], name: Florida 211}`); `build_index` and `verify_registry` ran in process "
        f"({', '.join(f'{job} {sec} s' for job, sec in data['build_s'].items())}); {data['rows_published']} rows published. {data['total']} questions generated from the "
        "rows (`resident_cases`: the TRUE county, the first program's type or the one program that fits) were asked "
        "through `/chat`'s code path (`SnapshotAsker`, extractive backend).",
        "",
        f"**Answered right: {data['passed']} / {data['total']}**",
        "",
        "| category | right | total |",
        "|---|---|---|",
    ]
    for name, row in data["by_category"].items():
        lines.append(f"| {name} | {row['passed']} | {row['total']} |")
    lines += ["", "| case | question | right | why not |", "|---|---|---|---|"]
    for case in data["cases"]:
        why = "; ".join(case["failures"]).replace("|", "/")[:200]
        lines.append(f"| {case['id']} | {case['question']} | {'yes' if case['passed'] else 'no'} | {why} |")
    lines.append(MARK_END)
    md = RESULTS / "registry_import.md"
    text = md.read_text(encoding="utf-8") if md.exists() else ""
    if MARK_BEGIN in text:
        text = text[: text.index(MARK_BEGIN)] + text[text.index(MARK_END) + len(MARK_END) + 1 :]
    md.write_text(text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--version", default="1.0", choices=("1.0", "1.1", "2.0"))
    parser.add_argument("--undated", default="unverified_shown", choices=("unverified_shown", "listed"))
    parser.add_argument("--keep", action="store_true", help="keep bench/.work/registry_answers")
    parser.add_argument("--reuse", action="store_true", help="ask the index a --keep run left (no rebuild)")
    args = parser.parse_args()
    build_s: dict[str, float] = {}
    if not (args.reuse and (WORK / "rag_index" / "CURRENT").exists()):
        shutil.rmtree(WORK, ignore_errors=True)
        WORK.mkdir(parents=True)
        package = write_package(WORK / "package", services=args.services, version=args.version, seed=args.seed)
        sources = write_deployment(WORK, package, undated=args.undated)
        build_s = build(sources, WORK / "rag_index")
    rows = published_rows(WORK / "rag_index")
    cases = resident_cases(rows)
    result = ask(WORK / "rag_index", write_suite(cases, WORK / "suite.yaml"))
    data = {
        "services": args.services, "seed": args.seed, "version": args.version, "undated": args.undated,
        "build_s": build_s, "rows_published": len(rows),
        "passed": result.passed, "total": result.total, "by_category": result.by_category(),
        "cases": [{**c.as_dict(), "question": q["question"], "expect": q["expect"]} for c, q in zip(result.cases, cases, strict=True)],
    }  # fmt: skip
    print(f"answered right: {result.passed} / {result.total}")
    for c in result.failed:
        print(f"  {c.id}: {'; '.join(c.failures)}")
    command = "HF_HUB_OFFLINE=1 .venv/bin/python -m bench.registry_answers " + " ".join(
        a for a in sys.argv[1:] if a not in ("--keep", "--reuse")
    )
    write_results(data, command.strip())
    if not args.keep:
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
