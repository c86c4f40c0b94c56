"""The nightly attention rollup: one day of usage traces → signals → attention scores with decay.

Attention is *confirmed* usefulness, not popularity. For day D (a calendar day in the configured timezone) and
each chunk c of the current index version:

    R  = retrievals of c on D                        (``retrieval`` events naming c: shown to someone)
    U  = useful evidence for c on D                  (1 per ``feedback`` useful=true naming c; a whole answer judged
                                                      useful — feedback naming no chunk — gives each of the n chunks
                                                      its query returned 1/n, when query and verdict share the day)
    N  = not-useful evidence for c on D              (the same for useful=false)
    C  = co-occurrences of c with useful chunks on D (pairs (query, u), u ≠ c confirmed useful, c also returned)
    Δ  = w_useful·U − w_not_useful·N + w_retrieval·R + w_co_occurrence·C      (defaults 1, 1, 0, 0)

    a_D = max(0, a_{D-1} + Δ)               if c was judged on D (a term of Δ with a nonzero weight is nonzero)
    a_D = a_{D-1}                           if c is SEALED (sealed memory never decays)
    a_D = a_{D-1} · (1 − r)                 otherwise, r the tone's daily rate: fast 0.05, normal 0.02, slow 0.01

So being shown earns nothing (retrieval weight 0): a chunk retrieved a thousand times that nobody confirmed keeps
decaying like an unused one, and negative feedback takes confirmed attention back. Serving turns attention into
a capped ranking multiplier (``livemem.query.signals.attention_multiplier``).

``last_breath_seen`` becomes the latest (highest) Δ-phase among the day's retrievals of c, else stays.

Chunks returned together within the first 5 results of a query become related (``related_chunks``, decayed
at the same rate), which serving uses for "consider also" suggestions.

``a_{D-1}`` is the state after the previous day's rollup, kept as ``attention_state/<D-1>.parquet`` in the index
home; a chunk missing there (new since) continues from the first of its ``chunk_lineage`` predecessors found in
it (an edited chunk keeps the attention of the one it replaced), else starts at 0. Because day D is always
computed from the state after D-1 and D's traces, re-running a day gives the same result, and days must run in
order (the Dagster asset depends on its own previous partition).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import Any, cast
from zoneinfo import ZoneInfo

import duckdb
import orjson
import pandas as pd
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from livemem.dates import iso, utc_now
from livemem.duck import registered
from livemem.errors import ConfigError
from livemem.extras import require
from livemem.settings import TraceSettings
from livemem.sources.breath import TONES, Breath
from livemem.sources.config import SourcesConfig
from livemem.usage.traces import trace_key
from livemem.version import connect
from livemem.version.schema import create_sql
from livemem.version.store import TABLES, IndexHome, derive_version, write_manifest

log = logging.getLogger(__name__)

SHARED_ENTRIES = ("chroma", "retrieval", "gis", "gbim")  # read-only for the rollup: hard-linked, never copied
_PHASE = re.compile(r"^Δ(\d+)$")
MAX_EXAMPLES = 10
RELATED_TOP_RANKS = 5  # chunks retrieved together within these ranks of one query are related
RELATED_PER_CHUNK = 20  # strongest relations kept per chunk
RELATED_MIN_WEIGHT = 0.05


class Weights(BaseModel):
    """How much each signal of a day moves attention (``Δ`` in the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    retrieval: float = 0.0  # being shown is not evidence of usefulness (popularity would swamp relevance)
    useful: float = 1.0
    not_useful: float = 1.0
    co_occurrence: float = 0.0  # a neighbour of a useful chunk was not itself confirmed; kept for related_chunks


class AttentionConfig(BaseModel):
    """The ``attention:`` section of the sources file (``schemas/attention_config.schema.json``), typed."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    timezone: str = "UTC"
    start_date: str = "2026-01-01"
    schedule_hour: int = 1
    weights: Weights = Weights()
    high_attention: float = 1.0

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except Exception as exc:
            raise ValueError(f"unknown timezone {value!r}") from exc
        return value

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)


def attention_config(config: SourcesConfig) -> AttentionConfig:
    """The section, validated against its schema (mistakes located by file, line and column), then typed."""
    raw = config.section("attention", "attention_config") or {}
    try:
        return AttentionConfig.model_validate(raw)
    except ValidationError:
        raise ConfigError(f"{config.path}: attention.timezone: unknown timezone {raw.get('timezone')!r}") from None


@dataclass
class DayEvents:
    """The valid events of one day, and what was wrong with the rest."""

    retrievals: list[tuple[str, str, str | None, int]] = field(default_factory=list)  # (trace, chunk, phase, rank)
    feedback: list[tuple[str, str | None, bool]] = field(default_factory=list)  # (trace, chunk or None, useful)
    callers: list[str | None] = field(default_factory=list)  # who gave each ``feedback`` (None: not recorded)
    questions: dict[str, str] = field(default_factory=dict)  # trace → the question it answered
    repeats: dict[str, str] = field(default_factory=dict)  # a repeated answer's trace → the trace it repeated
    malformed: int = 0
    examples: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    other_days: int = 0

    @property
    def count(self) -> int:
        return len(self.retrievals) + len(self.feedback) + len(self.repeats)

    def original(self, trace: str) -> str:
        """The trace whose answer ``trace`` gave: itself, or the first one a repeat names."""
        return self.repeats.get(trace, trace)

    def bad(self, where: str, why: str) -> None:
        self.malformed += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(f"{where}: {why}")


def day_bounds(day: date, tz: ZoneInfo) -> tuple[datetime, datetime]:
    start = datetime.combine(day, time.min, tzinfo=tz)
    return start, datetime.combine(day + timedelta(days=1), time.min, tzinfo=tz)


def read_day(trace_dir: Path, day: date, tz: ZoneInfo, dsn: str | None = None) -> DayEvents:
    """Every event of ``day`` (in ``tz``): from every trace file that may hold some (files are named by UTC date),
    or from the Postgres trace table when ``dsn`` is given."""
    start, end = day_bounds(day, tz)
    if dsn:
        return _read_day_postgres(dsn, start, end)
    names = {(start + timedelta(hours=h)).astimezone(ZoneInfo("UTC")).strftime("%Y-%m-%d") for h in (-24, 0, 24, 48)}
    out = DayEvents()
    files = sorted(p for name in names for p in trace_dir.glob(f"{name}*.jsonl")) if trace_dir.is_dir() else []
    lo, hi = start.timestamp(), end.timestamp()
    for path in files:
        out.files.append(path.name)
        with open(path, "rb") as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                _parse_line(line, f"{path.name}:{number}", lo, hi, out)
    return out


def _read_day_postgres(dsn: str, start: datetime, end: datetime) -> DayEvents:
    psycopg = require("postgres", "psycopg", "reading usage traces from Postgres")

    from livemem.usage.traces import TRACE_TABLE, ensure_trace_table

    out = DayEvents(files=[f"postgres:{TRACE_TABLE}"])
    lo, hi = start.timestamp(), end.timestamp()
    with psycopg.connect(dsn, connect_timeout=10) as conn:
        ensure_trace_table(conn)
        with conn.cursor(name="day_events") as cur:  # server-side cursor: the day is streamed, not loaded whole
            cur.execute(
                f"SELECT id, event::text FROM {TRACE_TABLE} WHERE ts >= %s AND ts < %s ORDER BY id", [start, end]
            )
            for row_id, text in cur:
                _parse_line(text.encode(), f"{TRACE_TABLE}#{row_id}", lo, hi, out)
    return out


_RECORD_START = b'{"timestamp":'


def _parse_line(line: bytes, where: str, lo: float, hi: float, out: DayEvents) -> None:
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        # A torn line (a write cut short by a full disk or a killed process, before the writer repaired such
        # tails) may have the next whole event glued to it: the torn part is counted, the event is kept.
        start = line.rfind(_RECORD_START)
        try:
            event = orjson.loads(line[start:]) if start > 0 else None
        except orjson.JSONDecodeError:
            event = None
        if event is None:
            out.bad(where, f"not JSON ({exc})")
            return
        out.bad(where, f"a torn line ({start} bytes) before an event: the event is kept")
    if not isinstance(event, dict):
        out.bad(where, "not a JSON object")
        return
    stamp, kind, trace, chunk = event.get("timestamp"), event.get("event"), event.get("trace_id"), event.get("chunk_id")
    try:
        when = datetime.fromisoformat(cast(str, stamp)).timestamp()  # not a str: TypeError, below
    except (TypeError, ValueError):
        out.bad(where, f"timestamp {stamp!r} is not ISO 8601")
        return
    if not isinstance(trace, str) or not (chunk is None or isinstance(chunk, str)):
        out.bad(where, "trace_id must be a string and chunk_id a string or null")
        return
    trace = trace_key(trace)  # older trace lines (before traces named a trace by its key) carry the whole signed id
    if not lo <= when < hi:
        out.other_days += 1
        return
    context = event.get("context")
    if isinstance(context, dict) and context.get("kind") == "gis":
        return  # spatial queries name GBIM entities, not chunks
    if kind == "retrieval":
        phase = event.get("breath_phase")
        rank = event.get("rank")
        if chunk is not None:
            phase = phase if isinstance(phase, str) and _PHASE.match(phase) else None
            out.retrievals.append((trace, chunk, phase, rank if isinstance(rank, int) else RELATED_TOP_RANKS))
            question = event.get("query")
            if isinstance(question, str) and question.strip():
                out.questions.setdefault(trace, question)
        elif isinstance(context, dict) and isinstance(context.get("repeat_of"), str):
            out.repeats[trace] = trace_key(context["repeat_of"])
    elif kind == "feedback":
        useful = event.get("useful")
        if not isinstance(useful, bool):
            out.bad(where, "feedback without a boolean 'useful'")
            return
        out.feedback.append((trace, chunk, useful))
        caller = event.get("caller")
        out.callers.append(caller if isinstance(caller, str) else None)
    else:
        out.bad(where, f"unknown event {kind!r}")


def verdicts(events: DayEvents) -> list[tuple[str, str | None, bool]]:
    """The day's feedback, one verdict per (trace, chunk) — the last one given: replaying a valid feedback call
    (the trace is signed, the chunk was returned by it) must not pump a chunk's attention."""
    return [(trace, chunk, verdict) for trace, chunk, verdict, _ in _last_per_trace(events)]


def _last_per_trace(events: DayEvents) -> list[tuple[str, str | None, bool, str | None]]:
    last: dict[tuple[str, str | None], tuple[bool, str | None]] = {}
    callers = events.callers if len(events.callers) == len(events.feedback) else [None] * len(events.feedback)
    for (trace, chunk, verdict), caller in zip(events.feedback, callers, strict=True):
        last.pop((trace, chunk), None)
        last[(trace, chunk)] = (verdict, caller)
    return [(trace, chunk, verdict, caller) for (trace, chunk), (verdict, caller) in last.items()]


def judgements(events: DayEvents) -> list[tuple[str, str, bool, float]]:
    """(trace, chunk, useful, evidence): what the day's feedback says about each chunk, one judgement per caller
    and chunk — the last one that caller gave that day.

    A verdict naming a chunk is worth 1 to it; one on a whole answer (no chunk) is shared by the n chunks that
    answer returned (1/n each), so judging an answer never says more about a chunk than judging the chunk itself.
    A caller (``caller`` of the event: a keyed tag of its API key, or of its address without one; events without
    it, older ones or from MCP, count as one caller per trace) who asks again and again, each time with a
    new signed trace, and judges the same chunk each time, still gives one judgement: 50 anonymous query and
    feedback pairs move a chunk as one verdict does."""
    return [(trace, c, verdict, share) for _, trace, c, verdict, share, _ in _judgements(events)]


def _judgements(events: DayEvents) -> list[tuple[str, str, str, bool, float, list[str]]]:
    """``judgements`` with who gave each, and every trace that caller found the chunk useful in that day."""
    retrieved_in: dict[str, set[str]] = defaultdict(set)
    for trace, retrieved, _, _ in events.retrievals:
        retrieved_in[trace].add(retrieved)
    last: dict[tuple[str, str], tuple[str, bool, float]] = {}
    useful_in: dict[tuple[str, str], list[str]] = defaultdict(list)
    for trace, chunk, verdict, caller in _last_per_trace(events):
        original = events.original(trace)
        judged = [chunk] if chunk is not None else sorted(retrieved_in.get(original, ()))
        who = caller if caller is not None else f"trace:{trace}"
        for c in judged:
            last.pop((who, c), None)
            last[(who, c)] = (original, verdict, 1.0 / len(judged))
            if verdict:
                useful_in[(who, c)].append(original)
    return [(who, trace, c, verdict, share, useful_in[(who, c)]) for (who, c), (trace, verdict, share) in last.items()]


def compute_signals(events: DayEvents, day: date, timezone: str) -> dict[str, Any]:
    """The day's signals (``schemas/signals.schema.json``)."""
    retrievals: Counter = Counter()
    phases: dict[str, Counter] = defaultdict(Counter)
    retrieved_in: dict[str, set[str]] = defaultdict(set)
    for trace, chunk, phase, _ in events.retrievals:
        retrievals[chunk] += 1
        retrieved_in[trace].add(chunk)
        if phase:
            phases[chunk][phase] += 1
    for original in events.repeats.values():  # a repeated answer was shown again: its chunks count as retrieved
        for chunk in retrieved_in.get(original, ()):
            retrievals[chunk] += 1
    useful: Counter = Counter()
    not_useful: Counter = Counter()
    # Evidence: 1 per judgement naming a chunk, 1/n per judgement on a whole answer of n chunks (``judgements``).
    # typeshed's Counter holds int counts; these hold float evidence (a Counter adds floats as well)
    useful_evidence: Counter = Counter()
    not_useful_evidence: Counter = Counter()
    useful_in: dict[str, set[str]] = defaultdict(set)
    for trace, c, verdict, share in judgements(events):
        if verdict:
            useful[c] += 1
            useful_evidence[c] += share  # type: ignore[assignment]
            useful_in[trace].add(c)
        else:
            not_useful[c] += 1
            not_useful_evidence[c] += share  # type: ignore[assignment]
    co_occurred: dict[str, Counter] = defaultdict(Counter)
    for trace, good in useful_in.items():
        for c in retrieved_in.get(trace, ()):
            for u in good:
                if u != c:
                    co_occurred[c][u] += 1
    usage = {}
    for c in set(retrievals) | set(useful) | set(not_useful) | set(co_occurred):
        usage[c] = {
            "retrievals": retrievals[c],
            "confirmed_useful": useful[c],
            "not_useful": not_useful[c],
            "useful_evidence": round(useful_evidence[c], 9),
            "not_useful_evidence": round(not_useful_evidence[c], 9),
            "co_occurred_with": sorted(co_occurred[c]),
            "co_occurrences": sum(co_occurred[c].values()),
            "breath_phases": dict(phases[c]),
        }
    return {
        "date": day.isoformat(),
        "timezone": timezone,
        "generated_at": iso(utc_now()),
        "trace_files": events.files,
        "events": events.count,
        "malformed_lines": events.malformed,
        "chunk_usage": usage,
        "breath_patterns": _breath_patterns(phases),
    }


def _breath_patterns(phases: dict[str, Counter]) -> dict[str, dict[str, Any]]:
    """Per Δ-phase, the day's retrievals in it and its ten most retrieved chunks (from each chunk's phase counts)."""
    patterns: dict[str, dict[str, Any]] = {}
    by_phase: dict[str, Counter] = defaultdict(Counter)
    for c, counts in phases.items():
        for phase, n in counts.items():
            by_phase[phase][c] += n
    for phase, counts in by_phase.items():
        patterns[phase] = {
            "total_retrievals": sum(counts.values()),
            "top_chunks": [c for c, _ in counts.most_common(10)],
        }
    return patterns


def _usage_frame(signals: dict[str, Any], weights: Weights) -> pd.DataFrame:
    rows = []
    for c, u in signals["chunk_usage"].items():
        latest = max(u["breath_phases"], key=lambda p: int(p[1:]), default=None)
        terms = (
            (weights.useful, u.get("useful_evidence", u["confirmed_useful"])),
            (-weights.not_useful, u.get("not_useful_evidence", u.get("not_useful", 0))),
            (weights.retrieval, u["retrievals"]),
            (weights.co_occurrence, u["co_occurrences"]),
        )
        delta = sum(w * n for w, n in terms)
        judged = any(w and n for w, n in terms)  # only what moves attention stops its decay for the day
        rows.append((c, delta, judged, latest))
    return pd.DataFrame(rows, columns=["chunk_id", "delta", "used", "latest_phase"]).astype(
        {"chunk_id": "string", "delta": "float64", "used": "bool", "latest_phase": "string"}
    )


def apply_day(
    con: duckdb.DuckDBPyConnection, previous_state: Path | None, signals: dict[str, Any], decay_rate: float,
    weights: Weights,
) -> None:  # fmt: skip
    """Replace the ``attention`` table of the connected version with the state after the day (formula above)."""
    with registered(con, _usage_frame(signals, weights), "usage") as usage:
        _apply_day(con, previous_state, usage, decay_rate)


def _apply_day(con: duckdb.DuckDBPyConnection, previous_state: Path | None, usage: str, decay_rate: float) -> None:
    prev = (
        f"SELECT chunk_id, attention_score, last_breath_seen FROM read_parquet('{previous_state}')"
        if previous_state is not None
        else "SELECT NULL::VARCHAR AS chunk_id, NULL::DOUBLE AS attention_score, NULL::VARCHAR AS last_breath_seen "
        "WHERE false"
    )
    has_lineage = _one_row(
        con.execute("SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'chunk_lineage'")
    )[0]
    lineage = (
        "chunk_lineage"
        if has_lineage
        else "(SELECT NULL::VARCHAR AS chunk_id, []::VARCHAR[] AS predecessors WHERE false)"
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE next_attention AS
        WITH prev AS ({prev}),
        ancestry AS (
            SELECT chunk_id, unnest(predecessors) AS predecessor, generate_subscripts(predecessors, 1) AS depth
            FROM {lineage}
        ),
        inherited AS (
            SELECT a.chunk_id, arg_min(p.attention_score, a.depth) AS score,
                   arg_min(p.last_breath_seen, a.depth) AS seen
            FROM ancestry a JOIN prev p ON p.chunk_id = a.predecessor GROUP BY a.chunk_id
        ),
        base AS (
            SELECT c.chunk_id, c.seal_state,
                   COALESCE(p.attention_score, i.score, 0) AS score,
                   CASE WHEN p.chunk_id IS NOT NULL THEN p.last_breath_seen ELSE i.seen END AS seen
            FROM chunks c LEFT JOIN prev p USING (chunk_id) LEFT JOIN inherited i USING (chunk_id)
        )
        SELECT b.chunk_id,
               CASE WHEN COALESCE(u.used, false) THEN greatest(0.0, b.score + u.delta)
                    WHEN b.seal_state = 'SEALED' THEN b.score
                    ELSE greatest(0.0, b.score * (1 - {float(decay_rate)!r})) END AS attention_score,
               CASE WHEN u.latest_phase IS NULL THEN b.seen
                    WHEN b.seen IS NULL THEN u.latest_phase
                    WHEN CAST(substr(u.latest_phase, 2) AS INTEGER) >= CAST(substr(b.seen, 2) AS INTEGER)
                         THEN u.latest_phase
                    ELSE b.seen END AS last_breath_seen
        FROM base b LEFT JOIN {usage} u USING (chunk_id)
        """
    )
    con.execute("DELETE FROM attention")
    # only chunks with some attention get a row (a chunk without one has score 0): the table stays O(used chunks)
    con.execute(
        "INSERT INTO attention SELECT chunk_id, attention_score, last_breath_seen FROM next_attention "
        "WHERE attention_score <> 0 OR last_breath_seen IS NOT NULL"
    )


def _one_row(result: duckdb.DuckDBPyConnection) -> tuple[Any, ...]:
    """``fetchone()`` of a query that always returns one row (an aggregate)."""
    return cast(tuple[Any, ...], result.fetchone())


def _has_table(con: duckdb.DuckDBPyConnection, table: str, catalog: str | None = None) -> bool:
    where = "table_name = ?" + (" AND table_catalog = ?" if catalog else "")
    params = [table, catalog] if catalog else [table]
    return bool(_one_row(con.execute(f"SELECT COUNT(*) FROM information_schema.tables WHERE {where}", params))[0])


def apply_related(
    con: duckdb.DuckDBPyConnection, previous_state: Path | None, events: DayEvents, decay_rate: float
) -> None:
    """Replace the ``related_chunks`` table: chunks retrieved together, for "consider also" suggestions.

    ``weight(c, d)`` after day D = weight after D-1 · (1 − r) + the number of queries of D that returned both c
    and d within their first 5 results + the number of callers who confirmed both c and d useful on D (in any of
    their answers: ``confirmed_together``); the 20 strongest relations per chunk above 0.05 are kept.

    Retrieved together alone can never be suggested beside the query that retrieved them: a chunk's neighbours in
    its first 5 are in its results again, and the one confirmed is lifted into them by its attention. What one
    person found useful for one question beside what they found useful for another ("SNAP applications", then
    "Medicaid renewal") is what a later asker of either may not have been shown.
    """
    rows = [(t, c) for t, c, _, rank in events.retrievals if rank <= RELATED_TOP_RANKS]
    rows += confirmed_together(events)
    pairs = pd.DataFrame(rows, columns=["trace", "chunk_id"]).astype("string")
    with registered(con, pairs, "pairs") as name:
        _apply_related(con, previous_state, name, decay_rate)


CONFIRMED_PER_CALLER = 20  # of one caller's confirmed chunks of a day, the first this many are related together


def confirmed_together(events: DayEvents) -> list[tuple[str, str]]:
    """(group, chunk): the chunks each caller confirmed useful by name on the day (their last verdict on it: yes),
    one group per caller (``confirmed-by:<caller>``) that confirmed two or more, at most ``CONFIRMED_PER_CALLER``
    each; callers not recorded (older events, MCP) give none, and a whole answer judged useful neither."""
    last: dict[tuple[str, str], bool] = {}
    for _, chunk, verdict, caller in _last_per_trace(events):
        if chunk is not None and caller is not None:
            last.pop((caller, chunk), None)
            last[(caller, chunk)] = verdict
    mine: dict[str, list[str]] = defaultdict(list)
    for (caller, chunk), useful in last.items():
        if useful and len(mine[caller]) < CONFIRMED_PER_CALLER:
            mine[caller].append(chunk)
    return [(f"confirmed-by:{caller}", c) for caller, chunks in mine.items() if len(chunks) > 1 for c in chunks]


def _apply_related(con: duckdb.DuckDBPyConnection, previous_state: Path | None, pairs: str, decay_rate: float) -> None:
    prev_file = previous_state.with_name(previous_state.stem + ".related.parquet") if previous_state else None
    prev = (
        f"SELECT chunk_id, related_id, weight FROM read_parquet('{prev_file}')"
        if prev_file is not None and prev_file.exists()
        else "SELECT NULL::VARCHAR AS chunk_id, NULL::VARCHAR AS related_id, NULL::DOUBLE AS weight WHERE false"
    )
    con.execute("DROP TABLE IF EXISTS related_chunks")
    con.execute(create_sql("related_chunks"))
    con.execute(
        f"""
        INSERT INTO related_chunks
        WITH today AS (
            SELECT a.chunk_id, b.chunk_id AS related_id, COUNT(DISTINCT a.trace)::DOUBLE AS weight
            FROM (SELECT DISTINCT trace, chunk_id FROM {pairs}) a
            JOIN (SELECT DISTINCT trace, chunk_id FROM {pairs}) b ON a.trace = b.trace AND a.chunk_id <> b.chunk_id
            GROUP BY 1, 2
        ),
        merged AS (
            SELECT chunk_id, related_id, SUM(weight) AS weight FROM (
                SELECT chunk_id, related_id, weight * (1 - {float(decay_rate)!r}) AS weight FROM ({prev})
                UNION ALL SELECT chunk_id, related_id, weight FROM today
            ) GROUP BY 1, 2
        ),
        present AS (
            SELECT m.* FROM merged m
            JOIN chunks c1 ON c1.chunk_id = m.chunk_id JOIN chunks c2 ON c2.chunk_id = m.related_id
            WHERE m.weight >= {RELATED_MIN_WEIGHT}
        )
        SELECT chunk_id, related_id, weight FROM present
        QUALIFY row_number() OVER (PARTITION BY chunk_id ORDER BY weight DESC, related_id) <= {RELATED_PER_CHUNK}
        """
    )


QUESTIONS_PER_CHUNK = 16  # strongest confirming questions remembered per chunk
QUESTION_MIN_WEIGHT = 0.01


def confirmations(events: DayEvents) -> list[tuple[str, str, float]]:
    """(chunk, question, evidence) for every useful judgement of the day (``judgements``) whose questions are known:
    the questions a chunk was confirmed useful for. A caller who found a chunk useful for several questions that day
    (and did not change its mind last) shares its one judgement's evidence among them, so each is remembered and
    the caller's evidence stays what ``U`` counts."""
    out = []
    for _, _, c, verdict, share, traces in _judgements(events):
        questions = dict.fromkeys(q for t in traces if (q := events.questions.get(t)) is not None)
        if verdict and questions:
            out += [(c, question, share / len(questions)) for question in questions]
    return out


def apply_questions(
    con: duckdb.DuckDBPyConnection, previous_state: Path | None, found: list[tuple[str, str, float]],
    decay_rate: float, embed: Any,
) -> None:  # fmt: skip
    """Replace the ``attention_questions`` table: per chunk, the questions it was confirmed useful for, as
    vectors of the serving model with a weight (the evidence, decayed like attention; sealed chunks' do not decay).

    Serving lifts a chunk only for questions like these (``livemem.query.signals.attention_multiplier``): a chunk
    confirmed for one question is not pushed into the answers of unrelated ones. Edited chunks inherit their
    predecessor's questions (``chunk_lineage``); the 16 strongest per chunk above 0.01 are kept.
    """
    today = _todays_questions(found, embed)
    prev, lineage = _question_inputs(con, previous_state)
    with registered(con, today, "today_questions") as name:
        con.execute("DROP TABLE IF EXISTS attention_questions")
        con.execute(create_sql("attention_questions"))
        con.execute(
            f"""
            INSERT INTO attention_questions
            WITH prev AS ({prev}),
            ancestry AS (
                SELECT chunk_id, unnest(predecessors) AS predecessor, generate_subscripts(predecessors, 1) AS depth
                FROM {lineage}
            ),
            heir AS (  -- a chunk new since yesterday continues from its nearest predecessor with questions
                SELECT a.chunk_id, arg_min(a.predecessor, a.depth) AS predecessor
                FROM ancestry a WHERE a.predecessor IN (SELECT chunk_id FROM prev)
                  AND a.chunk_id NOT IN (SELECT chunk_id FROM prev) GROUP BY a.chunk_id
            ),
            carried AS (
                SELECT p.chunk_id, p.question_key, p.vector, p.weight FROM prev p
                UNION ALL
                SELECT h.chunk_id, p.question_key, p.vector, p.weight FROM heir h JOIN prev p ON p.chunk_id = h.predecessor
            ),
            decayed AS (
                SELECT q.chunk_id, q.question_key, q.vector,
                       CASE WHEN c.seal_state = 'SEALED' THEN q.weight
                            ELSE q.weight * (1 - {float(decay_rate)!r}) END AS weight
                FROM carried q JOIN chunks c USING (chunk_id)
            ),
            merged AS (
                SELECT chunk_id, question_key, any_value(vector) AS vector, SUM(weight) AS weight FROM (
                    SELECT chunk_id, question_key, vector, weight FROM decayed
                    UNION ALL
                    SELECT c.chunk_id, CAST(t.question_key AS VARCHAR), CAST(t.vector AS FLOAT[]),
                           CAST(t.weight AS DOUBLE)
                    FROM {name} t JOIN chunks c ON c.chunk_id = CAST(t.chunk_id AS VARCHAR)
                ) GROUP BY 1, 2
            )
            SELECT chunk_id, question_key, vector, weight FROM merged WHERE weight >= {QUESTION_MIN_WEIGHT}
            QUALIFY row_number() OVER (PARTITION BY chunk_id ORDER BY weight DESC, question_key)
                    <= {QUESTIONS_PER_CHUNK}
            ORDER BY chunk_id, question_key
            """
        )


def _todays_questions(found: list[tuple[str, str, float]], embed: Any) -> pd.DataFrame:
    """The day's confirmations as rows of chunk, question key, question vector and weight (none when the
    questions could not be embedded)."""
    texts = sorted({q for _, q, _ in found})
    embedded = embed(texts) if texts else None
    if embedded is None:
        found = []
    vectors = dict(zip(texts, embedded, strict=True)) if found and embedded is not None else {}
    return pd.DataFrame(
        [(c, _question_key(q), [float(x) for x in vectors[q]], w) for c, q, w in found],
        columns=["chunk_id", "question_key", "vector", "weight"],
    )


def _question_inputs(con: duckdb.DuckDBPyConnection, previous_state: Path | None) -> tuple[str, str]:
    """SQL of the previous day's questions and of the chunk lineage (empty relations where there are none)."""
    prev_file = previous_state.with_name(previous_state.stem + ".questions.parquet") if previous_state else None
    prev = (
        f"SELECT chunk_id, question_key, vector, weight FROM read_parquet('{prev_file}')"
        if prev_file is not None and prev_file.exists()
        else "SELECT NULL::VARCHAR AS chunk_id, NULL::VARCHAR AS question_key, NULL::FLOAT[] AS vector, "
        "NULL::DOUBLE AS weight WHERE false"
    )
    has_lineage = _has_table(con, "chunk_lineage")
    lineage = (
        "chunk_lineage"
        if has_lineage
        else "(SELECT NULL::VARCHAR AS chunk_id, []::VARCHAR[] AS predecessors WHERE false)"
    )
    return prev, lineage


def _question_key(question: str) -> str:
    import hashlib

    return hashlib.sha256(" ".join(question.split()).lower().encode("utf-8")).hexdigest()[:32]


@dataclass
class RollupResult:
    day: str
    version_id: str | None
    base_version: str | None
    reason: str
    events: int = 0
    malformed: int = 0
    malformed_examples: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    chunks_used: int = 0
    attention_stats: dict[str, Any] = field(default_factory=dict)
    decay_rate: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def staged(self) -> bool:
        return self.version_id is not None


def state_dir(home: IndexHome) -> Path:
    return home.root / "attention_state"


def signals_dir(home: IndexHome) -> Path:
    return home.root / "signals"


def staged_state_dir(home: IndexHome, version_id: str) -> Path:
    """Where the state after a day waits while the version carrying it is staged (``settle_staged_state``)."""
    return state_dir(home) / ".staged" / version_id


def settle_staged_state(home: IndexHome) -> list[str]:
    """Move the state of every published staged version into ``attention_state/`` (and ``signals.json`` when its
    day is the latest), and drop the state of versions that were never published and are no longer staged (their
    check or publish failed and the staging area was cleared). A state counts as rolled up only once its version is
    published: a failed rollup never leaves a day that blocks the days before it. Returns the days settled."""
    settled = []
    root = state_dir(home) / ".staged"
    for pending in sorted(root.iterdir()) if root.is_dir() else []:
        version = pending.name
        if (home.version_dir(version) / "manifest.json").is_file():
            try:  # a rollup starting now may settle the same files: whoever moves one first, it is moved once
                for path in sorted(pending.glob("????-??-??*.parquet")):
                    os.replace(path, state_dir(home) / path.name)
                signals = pending / "signals.json"
                if signals.is_file():
                    day = orjson.loads(signals.read_bytes()).get("date", "")
                    latest = sorted(signals_dir(home).glob("????-??-??.json"))
                    if not latest or latest[-1].stem <= day:
                        os.replace(signals, home.root / "signals.json")
                    settled.append(day)
            except FileNotFoundError:
                pass
            shutil.rmtree(pending, ignore_errors=True)
        elif not home.staged_dir(version).is_dir() and not home.owner_file(version).exists():
            shutil.rmtree(pending, ignore_errors=True)  # never published, no longer staged: a failed rollup
    return settled


def _previous_state(home: IndexHome, day: date) -> Path | None:
    """The state after the latest rolled-up day before ``day`` (None: no rollup ran before it)."""
    earlier = sorted(p for p in state_dir(home).glob("????-??-??.parquet") if p.stem < day.isoformat())
    return earlier[-1] if earlier else None


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    os.replace(tmp, path)


def rollup_day(
    home: IndexHome, day: date, cfg: AttentionConfig, breath: Breath, trace_dir: Path | None = None,
    embedder: Any = None, traces: TraceSettings | None = None,
) -> RollupResult:  # fmt: skip
    """Roll up one day: write its signals and attention state, and stage a version with the new attention.

    ``embedder`` (a ``livemem.model.embedding.Embedder``, loaded when needed if None) embeds the questions chunks
    were confirmed useful for; it must be the model the version was built with. Traces are read from
    ``trace_dir``, else where ``traces`` (the entry point's ``TraceSettings``; None: the defaults) puts them for this
    index home, the directory the serving app writes to; or from the Postgres table its DSN names.

    Nothing is staged when the index is empty or the attention table would not change.
    """
    import time as clock

    t0 = clock.perf_counter()
    home.ensure()
    traces = traces or TraceSettings.defaults()
    events = read_day(trace_dir or traces.directory(home.root), day, cfg.tz, traces.dsn)
    signals = compute_signals(events, day, cfg.timezone)
    t1 = clock.perf_counter()
    result = RollupResult(
        day.isoformat(), None, home.current(), "", events.count, events.malformed, events.examples, events.files,
        chunks_used=len(signals["chunk_usage"]), decay_rate=TONES[breath.tone],
    )  # fmt: skip
    _write_json_atomic(signals_dir(home) / f"{day.isoformat()}.json", signals)
    latest = sorted(signals_dir(home).glob("????-??-??.json"))[-1].stem == day.isoformat()
    with home.write_lock():
        settle_staged_state(home)
        base = home.current()
        result.base_version = base
        if base is None:
            result.reason = "index is empty: nothing to roll attention onto (materialize the chunks first)"
            return result
        version_id, staged, base = derive_version(home, link=SHARED_ENTRIES)
        if base is None:  # cannot be: the write lock is held since the version above was read
            raise RuntimeError(f"index home {home.root} emptied while its write lock was held")
        # the state after the day waits beside the staged version; it counts once that version is published
        pending = staged_state_dir(home, version_id)
        changed, stats, model = _roll_into(
            staged, home, base, day, pending, events, signals, cfg, result.decay_rate, embedder
        )
        result.attention_stats = stats
        later = [p for p in state_dir(home).glob("????-??-??.parquet") if p.stem > day.isoformat()]
        if changed == 0 or later:
            result.reason = _keep_unchanged(home, staged, pending, day, base, later, signals if latest else None)
            result.timings = {"read_s": round(t1 - t0, 3), "total_s": round(clock.perf_counter() - t0, 3)}
            return result
        attention = _attention_section(day, cfg, events, result, changed, model)
        _write_rollup_manifest(home, staged, (version_id, base), breath, stats, attention)
        if latest:
            _write_json_atomic(pending / "signals.json", signals)
    result.version_id = version_id
    result.reason = "staged"
    result.timings = {"read_s": round(t1 - t0, 3), "total_s": round(clock.perf_counter() - t0, 3)}
    return result


def _roll_into(
    staged: Path, home: IndexHome, base: str, day: date, pending: Path, events: DayEvents, signals: dict[str, Any],
    cfg: AttentionConfig, decay_rate: float, embedder: Any,
) -> tuple[int, dict[str, Any], str | None]:  # fmt: skip
    """Apply the day to the staged version's attention, related chunks and questions, save the state after it in
    ``pending``; return how many rows differ from the published version, the attention stats and the question
    model (the index's model id)."""
    con = connect(staged, read_only=False)
    try:
        previous = _previous_state(home, day)
        apply_day(con, previous, signals, decay_rate, cfg.weights)
        apply_related(con, previous, events, decay_rate)
        found = confirmations(events)
        model = home.manifest(base).get("model", {}).get("id")
        apply_questions(con, previous, found, decay_rate, _embed_with(embedder, found, model))
        _save_state(con, pending, day)
        con.execute(f"ATTACH '{home.version_dir(base) / TABLES}' AS published (READ_ONLY)")
        changed = _changed_rows(con)
        stats = attention_stats(con, cfg.high_attention)
    finally:
        con.close()
    return changed, stats, model


def _save_state(con: duckdb.DuckDBPyConnection, pending: Path, day: date) -> None:
    """Write the state after ``day`` (attention, related chunks, questions) as parquet files in ``pending``."""
    for table, suffix in (
        ("attention", ""),
        ("related_chunks", ".related"),
        ("attention_questions", ".questions"),
    ):
        state = pending / f"{day.isoformat()}{suffix}.parquet"
        state.parent.mkdir(parents=True, exist_ok=True)
        tmp = state.with_name(f".{state.name}.tmp")
        con.execute(f"COPY {table} TO '{tmp}' (FORMAT parquet)")
        os.replace(tmp, state)


def _changed_rows(con: duckdb.DuckDBPyConnection) -> int:
    """Rows of attention, questions and related chunks that differ from the attached ``published`` version."""
    changed = _one_row(
        con.execute(
            "SELECT COUNT(*) FROM attention n FULL JOIN published.attention o USING (chunk_id) "
            "WHERE COALESCE(n.attention_score, 0) IS DISTINCT FROM COALESCE(o.attention_score, 0) "
            "OR n.last_breath_seen IS DISTINCT FROM o.last_breath_seen"
        )
    )[0]
    if not _has_table(con, "attention_questions", "published"):
        changed += _one_row(con.execute("SELECT COUNT(*) FROM attention_questions"))[0]
    else:
        changed += _one_row(
            con.execute(
                "SELECT COUNT(*) FROM attention_questions n FULL JOIN published.attention_questions o "
                "USING (chunk_id, question_key) WHERE n.weight IS DISTINCT FROM o.weight"
            )
        )[0]
    if not _has_table(con, "related_chunks", "published"):
        changed += _one_row(con.execute("SELECT COUNT(*) FROM related_chunks"))[0]
    else:
        changed += _one_row(
            con.execute(
                "SELECT COUNT(*) FROM related_chunks n FULL JOIN published.related_chunks o "
                "USING (chunk_id, related_id) WHERE n.weight IS DISTINCT FROM o.weight"
            )
        )[0]
    return changed


def _keep_unchanged(
    home: IndexHome, staged: Path, pending: Path, day: date, base: str, later: list[Path],
    signals: dict[str, Any] | None,
) -> str:  # fmt: skip
    """Nothing to publish: drop the staged version, make the pending state the day's (and ``signals`` the latest
    signals when given); return why nothing was staged."""
    shutil.rmtree(staged, ignore_errors=True)
    for path in sorted(pending.glob("*.parquet")):  # nothing to publish: the state is the day's now
        os.replace(path, state_dir(home) / path.name)
    shutil.rmtree(pending, ignore_errors=True)
    if signals is not None:
        _write_json_atomic(home.root / "signals.json", signals)
    return (
        f"attention unchanged by {day}: {base} stays current"
        if not later
        else f"state of {day} rewritten; later days ({len(later)}) were rolled up already, re-run them "
        "in order to publish"
    )


def _write_rollup_manifest(
    home: IndexHome, staged: Path, versions: tuple[str, str], breath: Breath, stats: dict[str, Any],
    attention: dict[str, Any],
) -> None:  # fmt: skip
    """Write the staged version's manifest: the base's (``versions`` = (version id, base)) with the rollup's stats,
    breath and ``attention`` section."""
    version_id, base = versions
    manifest = home.manifest(base)
    now = iso(utc_now())
    manifest.update(
        version_id=version_id,
        base_version=base,
        created_at=now,
        last_updated=now,
        attention_stats=stats,
        breath_at_update={"phase": breath.phase, "tone": breath.tone, "source": breath.source, "path": breath.path},
        attention=attention,
    )
    write_manifest(staged, manifest)


def _attention_section(
    day: date, cfg: AttentionConfig, events: DayEvents, result: RollupResult, changed: int, model: str | None
) -> dict[str, Any]:
    """The manifest's ``attention`` section of a rollup."""
    return {
        "last_rollup_day": day.isoformat(),
        "timezone": cfg.timezone,
        "weights": cfg.weights.model_dump(),
        "decay_rate": result.decay_rate,
        "events": events.count,
        "malformed_lines": events.malformed,
        "chunks_used": result.chunks_used,
        "changed_chunks": changed,
        "question_model": model,
    }


def _embed_with(embedder: Any, found: list, model: str | None) -> Any:
    """A function embedding question texts as the index's chunks were (``model``: its model id, so its precision),
    the model loaded only when there is something to embed."""

    def embed(texts: list[str]) -> Any:
        nonlocal embedder
        if embedder is None:
            from livemem.model.embedding import MODEL_ID, Embedder, precision_of

            if model and precision_of(model) is None:  # an index of another model: no vectors to compare with
                log.warning("index model %r is not %r: questions are not remembered", model, MODEL_ID)
                return None
            embedder = Embedder()
        if model and embedder.model_id != model:  # the index's precision (float32 or int8-block), if it is this model
            embedder = embedder.for_model_id(model) or embedder
        if model and embedder.model_id != model:
            raise ConfigError(
                f"the attention rollup embeds questions with {embedder.model_id!r} but the index was built with "
                f"{model!r}: give the rollup the index's embedder"
            )
        return embedder.encode(texts)

    return embed


def attention_stats(con: duckdb.DuckDBPyConnection, high: float, total: int | None = None) -> dict[str, Any]:
    """Average score, chunks at or above ``high`` and chunks never used, over every chunk of the version (chunks
    without an attention row have score 0 and no breath seen). ``total``: the version's chunk count, when known."""
    if total is None:
        total = _one_row(con.execute("SELECT COUNT(*) FROM chunks"))[0]
    summed, high_n, used = _one_row(
        con.execute(
            "SELECT COALESCE(SUM(attention_score), 0), COUNT(*) FILTER (WHERE attention_score >= ?), "
            "COUNT(*) FILTER (WHERE attention_score <> 0 OR last_breath_seen IS NOT NULL) FROM attention",
            [high],
        )
    )
    avg = float(summed) / total if total else 0.0
    return {"avg_score": round(avg, 6), "high_attention_chunks": high_n, "never_used_chunks": total - used}
