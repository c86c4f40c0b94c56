"""The nightly attention rollup: signals, decay per tone, sealed immunity, idempotence, order, schedule."""

from __future__ import annotations

import json
import uuid
from datetime import date, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import pytest
from dagster import DagsterInstance, build_schedule_context

from livemem.ingest.build import build_version
from livemem.ingest.checks import check_attention
from livemem.schemas import errors_for
from livemem.sources.breath import Breath
from livemem.sources.config import load_sources
from livemem.usage.attention import AttentionConfig, rollup_day, settle_staged_state, signals_dir, state_dir
from livemem.version import connect
from livemem.version.store import IndexHome
from orchestration.definitions import build_definitions

DOCS = {
    "CONSTITUTION.md": "# Constitution\n\nSeal: ∞Δ∞\n\nSealed records never decay.\n",
    "guide.md": "# Guide\n\n## SNAP\n\nFood help in Oak Hill.\n\n## WIC\n\nNutrition for infants.\n",
    "faq.md": "# FAQ\n\nHow do I apply for heating help?\n",
}


def event(day: str, kind: str, trace: str, chunk: str | None, **extra) -> str:
    return json.dumps(
        {
            "timestamp": f"{day}T12:00:00Z",
            "event": kind,
            "trace_id": trace,
            "chunk_id": chunk,
            "query": extra.pop("query", "q") if kind == "retrieval" else None,
            "breath_phase": extra.pop("phase", None),
            "agent": "test",
            "role": "public",
            "useful": extra.pop("useful", None),
            "index_version": "v",
            "context": {"related_chunks": []},
        }
    )


def confirm(day: str, chunk: str) -> list[str]:
    """A query that returned ``chunk`` and feedback that it was useful."""
    trace = str(uuid.uuid4())
    return [event(day, "retrieval", trace, chunk), event(day, "feedback", trace, chunk, useful=True)]


def write_traces(home: IndexHome, day: str, lines: list[str], name: str = "host-1") -> None:
    home.traces.mkdir(parents=True, exist_ok=True)
    with open(home.traces / f"{day}-{name}.jsonl", "a", encoding="utf-8") as fh:
        fh.write("".join(line + "\n" for line in lines))


def attention(home: IndexHome) -> dict[str, tuple[float, str | None]]:
    con = connect(home.version_dir(home.current()))
    try:
        rows = con.execute(  # a chunk without an attention row has score 0 and no breath seen
            "SELECT c.chunk_id, COALESCE(a.attention_score, 0), a.last_breath_seen "
            "FROM chunks c LEFT JOIN attention a USING (chunk_id)"
        ).fetchall()
    finally:
        con.close()
    return {c: (round(s, 9), b) for c, s, b in rows}


def roll(home: IndexHome, day: str, tone: str = "normal", cfg: AttentionConfig | None = None, embedder=None):
    result = rollup_day(home, date.fromisoformat(day), cfg or AttentionConfig(), Breath("Δ3", tone), embedder=embedder)
    if result.staged:
        home.publish(result.version_id, result.base_version, 10)
        settle_staged_state(home)  # what attention_published does once the version is current
    return result


@pytest.fixture
def index(tmp_path: Path, make_repo, embedder):
    repo = make_repo(files=DOCS)
    sources = tmp_path / "sources.yaml"
    sources.write_text(f"sources:\n  - {{name: docs, repo: {repo.path}, collection: docs}}\n", encoding="utf-8")
    home = IndexHome(tmp_path / "index")
    result = build_version(load_sources(sources), home, embedder)
    home.publish(result.version_id, None, 10)
    con = connect(home.version_dir(home.current()))
    ids = {json.loads(h)[-1]: c for c, h in con.execute("SELECT chunk_id, heading_path FROM chunks").fetchall()}
    con.close()
    return home, ids, repo, sources


@pytest.mark.parametrize(("tone", "rate"), [("fast", 0.05), ("normal", 0.02), ("slow", 0.01)])
def test_unused_open_chunks_decay_at_the_tone_rate_and_sealed_never(index, tone: str, rate: float) -> None:
    home, ids, _, _ = index
    sealed, snap = ids["Constitution"], ids["SNAP"]
    write_traces(home, "2026-03-01", [line for c in (sealed, snap) for line in confirm("2026-03-01", c)])
    roll(home, "2026-03-01", tone)
    assert attention(home)[snap] == (1.0, None) and attention(home)[sealed] == (1.0, None)
    roll(home, "2026-03-02", tone)  # no traces: decay
    assert attention(home)[snap][0] == pytest.approx(1 - rate)
    assert attention(home)[sealed][0] == pytest.approx(1.0)  # sealed: exempt
    roll(home, "2026-03-03", tone)
    assert attention(home)[snap][0] == pytest.approx((1 - rate) ** 2)
    assert attention(home)[ids["WIC"]] == (0.0, None)  # never used: stays at 0


def test_replayed_feedback_counts_once_and_the_last_verdict_wins(index) -> None:
    home, ids, _, _ = index
    trace, day = str(uuid.uuid4()), "2026-03-06"
    lines = [event(day, "retrieval", trace, ids["SNAP"]), event(day, "retrieval", trace, ids["WIC"])]
    lines += [event(day, "feedback", trace, ids["SNAP"], useful=True)] * 5  # the same valid call, replayed
    lines += [
        event(day, "feedback", trace, ids["WIC"], useful=True),
        event(day, "feedback", trace, ids["WIC"], useful=False),
    ]
    write_traces(home, day, lines)
    roll(home, day)
    att = attention(home)
    assert att[ids["SNAP"]][0] == pytest.approx(1.0)
    assert att[ids["WIC"]][0] == 0.0  # changed its mind: not useful after all


def test_only_confirmed_usefulness_raises_attention(index) -> None:
    home, ids, _, _ = index
    t1, t2 = str(uuid.uuid4()), str(uuid.uuid4())
    day = "2026-03-05"
    lines = [
        event(day, "retrieval", t1, ids["SNAP"], phase="Δ2"),
        event(day, "retrieval", t1, ids["WIC"], phase="Δ2"),
        event(day, "retrieval", t1, ids["FAQ"], phase="Δ2"),
        event(day, "feedback", t1, ids["SNAP"], useful=True),
        event(day, "retrieval", t2, ids["SNAP"], phase="Δ4"),
        event(day, "feedback", t2, None, useful=True),  # the whole answer was useful
    ]
    write_traces(home, day, lines)
    result = roll(home, day)
    assert result.staged and result.events == 6 and result.malformed == 0
    att = attention(home)
    # SNAP: confirmed twice (explicitly, and as the only chunk of a whole answer judged useful)
    assert att[ids["SNAP"]] == (pytest.approx(2.0), "Δ4")
    # WIC and FAQ: shown beside the useful SNAP, never confirmed: seen, but no attention
    assert att[ids["WIC"]] == (0.0, "Δ2") and att[ids["FAQ"]] == (0.0, "Δ2")
    signals = json.loads((signals_dir(home) / f"{day}.json").read_text())
    assert not errors_for("signals", signals)
    assert signals == json.loads((home.root / "signals.json").read_text())
    usage = signals["chunk_usage"][ids["WIC"]]
    assert usage["co_occurred_with"] == [ids["SNAP"]] and usage["breath_phases"] == {"Δ2": 1}
    assert signals["breath_patterns"]["Δ2"]["total_retrievals"] == 3
    assert signals["breath_patterns"]["Δ4"]["top_chunks"] == [ids["SNAP"]]
    con = connect(home.version_dir(home.current()))
    related = dict(
        con.execute("SELECT related_id, weight FROM related_chunks WHERE chunk_id = ?", [ids["WIC"]]).fetchall()
    )
    con.close()
    assert related == {ids["SNAP"]: 1.0, ids["FAQ"]: 1.0}  # returned together by query t1
    manifest = home.current_manifest()
    assert manifest["attention"]["last_rollup_day"] == day
    assert manifest["attention_stats"]["high_attention_chunks"] == 1
    assert manifest["attention_stats"]["never_used_chunks"] == len(att) - 3
    assert manifest["breath_at_update"]["phase"] == "Δ3"


def test_rerunning_a_day_gives_the_same_result(index) -> None:
    home, ids, _, _ = index
    write_traces(home, "2026-03-01", confirm("2026-03-01", ids["SNAP"]))
    roll(home, "2026-03-01")
    write_traces(home, "2026-03-02", confirm("2026-03-02", ids["WIC"]))
    assert roll(home, "2026-03-02").staged
    first, version = attention(home), home.current()
    again = roll(home, "2026-03-02")
    assert not again.staged and "unchanged" in again.reason
    assert attention(home) == first and home.current() == version
    # re-running an earlier day rewrites its state but does not publish over later days
    earlier = roll(home, "2026-03-01")
    assert not earlier.staged and "re-run them" in earlier.reason and home.current() == version


def test_malformed_lines_are_counted_and_skipped(index) -> None:
    home, ids, _, _ = index
    day = "2026-03-07"
    write_traces(
        home,
        day,
        [
            *confirm(day, ids["SNAP"]),
            "{not json",
            "[1, 2]",
            json.dumps({"timestamp": "yesterday", "event": "retrieval", "trace_id": "t", "chunk_id": ids["WIC"]}),
            json.dumps({"timestamp": f"{day}T01:00:00Z", "event": "feedback", "trace_id": "t", "chunk_id": None}),
            json.dumps({"timestamp": f"{day}T01:00:00Z", "event": "explode", "trace_id": "t", "chunk_id": None}),
            event("2026-03-08", "retrieval", "t", ids["WIC"]),  # another day: not malformed, not counted
        ],
    )
    result = roll(home, day)
    assert result.malformed == 5 and result.events == 2
    assert any("not JSON" in e for e in result.malformed_examples)
    assert attention(home)[ids["SNAP"]][0] == pytest.approx(1.0)
    assert attention(home)[ids["WIC"]][0] == 0.0


def test_days_follow_the_configured_timezone(index) -> None:
    home, ids, _, _ = index
    # 03:00 UTC on March 2nd is still March 1st in New York
    line = event("2026-03-02", "retrieval", "t", ids["SNAP"]).replace("T12:00:00Z", "T03:00:00Z")
    write_traces(home, "2026-03-02", [line])
    ny = AttentionConfig(timezone="America/New_York")
    assert roll(home, "2026-03-01", cfg=ny).events == 1
    assert roll(home, "2026-03-02", cfg=ny).events == 0


def test_attention_survives_reindexing_and_follows_edits(index, embedder) -> None:
    home, ids, repo, sources = index
    write_traces(home, "2026-03-01", [line for c in (ids["SNAP"], ids["WIC"]) for line in confirm("2026-03-01", c)])
    roll(home, "2026-03-01")
    repo.commit({"guide.md": DOCS["guide.md"].replace("Nutrition for infants.", "Nutrition for infants and mothers.")})
    rebuilt = build_version(load_sources(sources), home, embedder)
    home.publish(rebuilt.version_id, rebuilt.base_version, 10)
    con = connect(home.version_dir(home.current()))
    new_wic = con.execute("SELECT chunk_id FROM chunks WHERE heading_path LIKE '%WIC%'").fetchone()[0]
    con.close()
    att = attention(home)
    assert new_wic != ids["WIC"]
    assert att[ids["SNAP"]][0] == pytest.approx(1.0)  # unchanged chunk keeps its attention
    assert att[new_wic][0] == pytest.approx(1.0)  # the edited chunk inherits the one it replaced
    roll(home, "2026-03-02")  # the next night continues from the predecessor's state, then decays
    assert attention(home)[new_wic][0] == pytest.approx(0.98)


def test_dagster_backfill_runs_days_in_order_and_schedule_targets_yesterday(index, tmp_path: Path) -> None:
    home, ids, _, sources = index
    for day in ("2026-03-01", "2026-03-02", "2026-03-03"):
        write_traces(home, day, confirm(day, ids["SNAP"]))
    defs = build_definitions(sources, home.root)
    job = defs.resolve_job_def("attention_rollup_job")
    instance = DagsterInstance.ephemeral()
    for day in ("2026-03-01", "2026-03-02", "2026-03-03"):
        result = job.execute_in_process(instance=instance, partition_key=day)
        assert result.success
    assert sorted(p.stem for p in state_dir(home).glob("????-??-??.parquet")) == [
        "2026-03-01",
        "2026-03-02",
        "2026-03-03",
    ]
    assert attention(home)[ids["SNAP"]][0] == pytest.approx(3.0)
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks == {"attention_valid": True, "answers_not_worse": True}  # the gate: no suite named, nothing to ask
    graph = defs.resolve_asset_graph()
    rollup_key = next(k for k in graph.get_all_asset_keys() if k.to_user_string() == "attention_rollup")
    assert rollup_key in graph.get(rollup_key).parent_keys  # depends on its own previous day

    schedule = defs.resolve_schedule_def("nightly_attention_rollup")
    context = build_schedule_context(
        instance=instance, scheduled_execution_time=datetime(2026, 11, 22, 1, 0, tzinfo=ZoneInfo("UTC"))
    )
    requests = schedule.evaluate_tick(context).run_requests
    assert [r.partition_key for r in requests] == ["2026-11-21"]


def test_exposure_alone_earns_nothing_and_negative_feedback_takes_attention_back(index) -> None:
    home, ids, _, _ = index
    day = "2026-03-10"
    shown = [event(day, "retrieval", str(uuid.uuid4()), ids["FAQ"]) for _ in range(50)]  # popular, never confirmed
    answer = str(uuid.uuid4())  # one answer of two chunks judged useful as a whole: half a confirmation each
    whole = [event(day, "retrieval", answer, c) for c in (ids["SNAP"], ids["WIC"])]
    whole.append(event(day, "feedback", answer, None, useful=True))
    write_traces(home, day, shown + whole + confirm(day, ids["SNAP"]))
    roll(home, day)
    att = attention(home)
    assert att[ids["FAQ"]][0] == 0.0
    assert att[ids["SNAP"]][0] == pytest.approx(1.5) and att[ids["WIC"]][0] == pytest.approx(0.5)
    day = "2026-03-11"
    trace = str(uuid.uuid4())
    wrong = [event(day, "retrieval", trace, c) for c in (ids["SNAP"], ids["WIC"])]
    wrong += [
        event(day, "feedback", trace, ids["SNAP"], useful=False),
        event(day, "feedback", trace, ids["WIC"], useful=False),
    ]
    write_traces(home, day, [*wrong, event(day, "retrieval", str(uuid.uuid4()), ids["FAQ"])])
    roll(home, day)
    att = attention(home)
    assert att[ids["SNAP"]][0] == pytest.approx(0.5)  # judged not useful once: one confirmation taken back
    assert att[ids["WIC"]][0] == 0.0  # never below zero
    assert att[ids["FAQ"]][0] == 0.0


def test_the_questions_chunks_were_confirmed_for_are_remembered_decay_and_follow_edits(index, embedder) -> None:
    home, ids, repo, sources = index
    day = "2026-03-12"
    food, answer = str(uuid.uuid4()), str(uuid.uuid4())
    lines = [
        event(day, "retrieval", food, ids["SNAP"], query="where do I apply for food help"),
        event(day, "feedback", food, ids["SNAP"], useful=True),
        *[event(day, "retrieval", answer, c, query="nutrition help for my baby") for c in (ids["SNAP"], ids["WIC"])],
        event(day, "feedback", answer, None, useful=True),  # a whole answer: half a confirmation each
        event(day, "retrieval", str(uuid.uuid4()), ids["FAQ"], query="heating help"),  # shown, never confirmed
    ]
    write_traces(home, day, lines)
    roll(home, day, embedder=embedder)
    assert home.current_manifest()["attention"]["question_model"] == embedder.model_id
    food_vec, baby_vec = embedder.encode(["where do I apply for food help", "nutrition help for my baby"])
    remembered = questions(home)
    assert set(remembered) == {ids["SNAP"], ids["WIC"]}  # FAQ was only shown
    assert [w for w, _ in remembered[ids["SNAP"]]] == [1.0, 0.5]
    assert remembered[ids["SNAP"]][0][1] == pytest.approx(food_vec.tolist(), abs=1e-6)
    assert remembered[ids["WIC"]] == [(0.5, pytest.approx(baby_vec.tolist(), abs=1e-6))]
    roll(home, "2026-03-13", embedder=embedder)  # a day without use: the questions fade with the chunk
    assert [w for w, _ in questions(home)[ids["SNAP"]]] == [pytest.approx(0.98), pytest.approx(0.49)]
    repo.commit({"guide.md": DOCS["guide.md"].replace("Nutrition for infants.", "Nutrition for infants and mothers.")})
    rebuilt = build_version(load_sources(sources), home, embedder)
    home.publish(rebuilt.version_id, rebuilt.base_version, 10)
    roll(home, "2026-03-14", embedder=embedder)
    after = questions(home)
    new_wic = next(c for c in after if c not in ids.values())  # the edited WIC section keeps its question
    assert [w for w, _ in after[new_wic]] == [pytest.approx(0.5 * 0.98 * 0.98)] and ids["WIC"] not in after
    assert check_attention(home.version_dir(home.current())).passed
    damaged = home.version_dir(home.current())
    con = connect(damaged, read_only=False)
    con.execute("UPDATE attention_questions SET weight = 'nan'::DOUBLE WHERE chunk_id = ?", [new_wic])
    con.execute("UPDATE attention_questions SET chunk_id = 'gone' WHERE chunk_id = ?", [ids["SNAP"]])
    con.close()
    outcome = check_attention(damaged)
    assert not outcome.passed
    assert any("non-finite weight" in f for f in outcome.failures)
    assert any("chunks this version does not hold" in f for f in outcome.failures)


def questions(home: IndexHome) -> dict[str, list[tuple[float, list[float]]]]:
    """The question memory of the current version: chunk → (weight, vector), strongest first."""
    con = connect(home.version_dir(home.current()))
    try:
        rows = con.execute("SELECT chunk_id, weight, vector FROM attention_questions ORDER BY weight DESC").fetchall()
    finally:
        con.close()
    out: dict[str, list[tuple[float, list[float]]]] = {}
    for chunk, weight, vector in rows:
        out.setdefault(chunk, []).append((round(weight, 9), vector))
    return out


def test_questions_are_embedded_in_the_precision_the_index_was_built_in(tmp_path: Path, make_repo, embedder) -> None:
    """An index built in float32 (``index.precision: fp32``) and a rollup given the default (int8-block) embedder:
    the questions are embedded in float32, under the index's model id, so serving still compares them."""
    repo = make_repo(files=DOCS)
    sources = tmp_path / "sources.yaml"
    sources.write_text(
        f"index:\n  precision: fp32\nsources:\n  - {{name: docs, repo: {repo.path}, collection: docs}}\n",
        encoding="utf-8",
    )
    home = IndexHome(tmp_path / "index")
    result = build_version(load_sources(sources), home, embedder)
    home.publish(result.version_id, None, 10)
    assert embedder.model_id.endswith(":int8-block")
    assert home.current_manifest()["model"]["id"] == "sentence-transformers/all-MiniLM-L6-v2"
    con = connect(home.version_dir(home.current()))
    chunk = con.execute("SELECT chunk_id FROM chunks ORDER BY chunk_id LIMIT 1").fetchone()[0]
    con.close()
    day = "2026-03-12"
    trace = str(uuid.uuid4())
    write_traces(home, day, [
        event(day, "retrieval", trace, chunk, query="where do I apply for food help"),
        event(day, "feedback", trace, chunk, useful=True),
    ])  # fmt: skip
    roll(home, day, embedder=embedder)
    assert home.current_manifest()["attention"]["question_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    ((_, vector),) = questions(home)[chunk]
    exact = embedder.with_encoder(None, "fp32").encode(["where do I apply for food help"])[0]
    np.testing.assert_allclose(vector, exact, atol=1e-6)


GATE_SUITE = """\
version: 1
name: attention-gate
cases:
  - id: snap
    category: need
    question: SNAP food help in Oak Hill
    expect: {must_cite: [guide.md]}
  - id: never
    category: need
    question: heating help
    expect: {must_cite: [missing.md]}
"""


def test_the_nightly_publish_runs_the_answer_gate_and_a_refused_rollup_stays_unpublished(index) -> None:
    """Issue 49: the attention rollup published with no answer-suite check. Its job now runs the blocking
    ``answers_not_worse`` gate like every publishing job; a version the gate refuses (here: under ``min_accuracy``)
    never becomes CURRENT, and its attention state is not counted as rolled up."""
    home, ids, _, sources = index
    (sources.parent / "gate-suite.yaml").write_text(GATE_SUITE, encoding="utf-8")
    with open(sources, "a", encoding="utf-8") as fh:
        fh.write("eval: {suite: gate-suite.yaml, gate: true, min_accuracy: 1.0}\n")
    write_traces(home, "2026-03-01", confirm("2026-03-01", ids["SNAP"]))
    before = home.current()
    defs = build_definitions(sources, home.root)
    result = defs.resolve_job_def("attention_rollup_job").execute_in_process(
        instance=DagsterInstance.ephemeral(), partition_key="2026-03-01", raise_on_error=False
    )
    assert not result.success
    gate = {e.check_name: e for e in result.get_asset_check_evaluations()}["answers_not_worse"]
    assert not gate.passed and "below min_accuracy" in gate.description
    assert gate.metadata["staged_passed"].value == 1 and "`never` (need)" in gate.metadata["failing"].value
    assert home.current() == before
    assert not list(state_dir(home).glob("2026-03-01*.parquet"))
