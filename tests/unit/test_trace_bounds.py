"""Usage traces stay small and whole (issue 33): a request's trace is linear in its results and bounded, a repeated
answer is one line, a write that fails part way leaves no torn line, the rollup reads torn, old and new lines, and
one caller's verdicts on a chunk count once a day."""

from __future__ import annotations

import errno
import json
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from livemem.usage.attention import compute_signals, confirmations, read_day
from livemem.usage.traces import (
    RepeatWindow,
    TraceSigner,
    TraceWriter,
    feedback_events,
    retrieval_events,
    trace_key,
)

SIGNER = TraceSigner(b"a test secret of at least 16 bytes")
VERSION = "20261126T065447Z-0123456789ab"


def today():
    """The UTC date now, when a test asks: a date taken at import went stale when CI's collection ran before
    midnight and these tests after it (the writer names its file by the date it writes)."""
    return datetime.now(UTC).date()


def chunk_ids(n: int) -> list[str]:
    return [str(uuid.UUID(int=i + 1)) for i in range(n)]


def request_events(ids: list[str], query: str = "heating help", **extra) -> tuple[str, list[dict]]:
    trace_id = extra.pop("trace_id", None) or SIGNER.issue(role="public", index_version=VERSION, chunk_ids=ids)
    events = retrieval_events(
        trace_id=trace_id, query=query, chunk_ids=ids, scores=[0.123456789] * len(ids), role="public",
        breath_phase="Δ3", index_version=VERSION, mode="hybrid", return_="chunks", filters=extra.pop("filters", {}),
        collections=["wv_benefits"], cache_hit=False, **extra,
    )  # fmt: skip
    return trace_id, events


def verdict(trace_id: str, chunks: list[str], caller: str, useful: bool = True) -> list[dict]:
    return feedback_events(
        trace_id=trace_id, chunk_ids=chunks, useful=useful, role="public", breath_phase=None, index_version=VERSION,
        caller=caller,
    )  # fmt: skip


def written_bytes(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.glob("*.jsonl"))


def lines(directory: Path) -> list[dict]:
    return [json.loads(x) for f in sorted(directory.glob("*.jsonl")) for x in f.read_text().splitlines()]


def day(directory: Path):
    events = read_day(directory, today(), UTC)
    return events, compute_signals(events, today(), "UTC")


def test_a_long_top_200_request_writes_a_bounded_trace_linear_in_its_results(tmp_path: Path):
    """The measurement of issue 33: a 3,999-character query with top_k 200 wrote 1.37 MB (each event repeating the
    query, every other chunk id and a 1.1 kB trace id). Now: the query once, one small line per further result, the
    signed id nowhere; even with control characters (6 bytes each as JSON) and filters over the summary budget."""
    ids = chunk_ids(200)
    worst = {"source": [f"source-{i:04d}-" + "x" * 190 for i in range(50)], "county": ["Fayette"] * 50}
    for query, filters in (("w" * 3_999, {}), ("\x00" * 3_999, worst)):
        directory = tmp_path / f"q{len(os.listdir(tmp_path))}"
        trace_id, events = request_events(ids, query, filters=filters)
        assert TraceWriter(directory).write(events)
        assert written_bytes(directory) < 64 * 1024, written_bytes(directory)
        text = next(directory.glob("*.jsonl")).read_text()
        assert trace_id not in text and text.count(trace_key(trace_id)) == 200
        record, *hits = lines(directory)
        assert record["query"].strip("\x00w") == "" and record["chunk_id"] == ids[0]
        assert [h["chunk_id"] for h in hits] == ids[1:] and all(h["context"] == {} for h in hits)
        assert len(text.splitlines()[0].encode()) <= 14 * 1024  # the record: query, summaries, shared fields
        assert max(len(x.encode()) for x in text.splitlines()[1:]) <= 256
    # linear: 100 more results cost 100 small lines
    small, large = tmp_path / "small", tmp_path / "large"
    TraceWriter(small).write(request_events(ids[:100])[1])
    TraceWriter(large).write(request_events(ids)[1])
    assert written_bytes(large) - written_bytes(small) <= 100 * 256


def test_a_repeated_answer_is_one_line_and_counts_for_the_first(tmp_path: Path):
    now = [0.0]
    window = RepeatWindow(window_s=60, timer=lambda: now[0])
    ids = chunk_ids(130)
    first_id, first = request_events(ids)
    assert window.first("caller-a", "request", ids, first_id) is None
    writer = TraceWriter(tmp_path)
    writer.write(first)
    full = written_bytes(tmp_path)
    repeats = []
    for _ in range(100):
        trace_id = SIGNER.issue(role="public", index_version=VERSION, chunk_ids=ids)
        repeats.append(trace_id)
        of = window.first("caller-a", "request", ids, trace_id)
        assert of == trace_key(first_id)
        writer.write(request_events(ids, repeat_of=of, trace_id=trace_id)[1])
    assert written_bytes(tmp_path) - full < 100 * 512  # 100 repeats: under 50 kB, not 100 full traces
    assert window.first("caller-b", "request", ids, repeats[0]) is None  # another caller: its own first
    assert window.first("caller-a", "request", ids[:-1], repeats[0]) is None  # another answer
    now[0] = 61.0
    assert window.first("caller-a", "request", ids, repeats[-1]) is None  # the window has passed: in full again
    # A whole-answer verdict on a repeat's trace counts for the first answer's chunks; repeats count as retrievals.
    writer.write(verdict(repeats[-1], [], "c1"))
    events, signals = day(tmp_path)
    assert len(events.repeats) == 100 and events.malformed == 0
    usage = signals["chunk_usage"][ids[0]]
    assert usage["retrievals"] == 101 and usage["useful_evidence"] == pytest.approx(1 / 130)
    assert {q for _, q, _ in confirmations(events)} == {"heating help"}


def _failing_after(limit: int, error: int):
    """An ``os.write`` that writes at most ``limit`` more bytes to trace files, then fails with ``error``."""
    real = os.write
    budget = [limit]

    def write(fd: int, data) -> int:
        if not os.readlink(f"/proc/self/fd/{fd}").endswith(".jsonl"):
            return real(fd, data)
        if budget[0] <= 0:
            raise OSError(error, os.strerror(error))
        done = real(fd, bytes(data[: budget[0]]))
        budget[0] -= done
        return done

    return write


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EFBIG])
def test_a_write_that_fails_part_way_leaves_no_torn_line_and_the_next_one_counts(tmp_path, monkeypatch, error):
    """Issue 33, defect 7: after ENOSPC the file ended mid-line and the next feedback, answered 200, was glued to
    it and lost by the rollup. Now the failed block is taken back whole; the next write lands whole and counts."""
    ids = chunk_ids(3)
    trace_id, events = request_events(ids)
    writer = TraceWriter(tmp_path)
    assert writer.write(events)
    before = next(tmp_path.glob("*.jsonl")).read_bytes()
    common = {"trace_id": trace_id, "role": "public", "breath_phase": None, "index_version": VERSION}
    monkeypatch.setattr(os, "write", _failing_after(100, error))  # the disk fills 100 bytes into the block
    refused = feedback_events(chunk_ids=ids[:1], useful=True, caller="c1", **common)
    assert writer.write_through(refused, wait_s=1, queue=False, sync=True) is False
    assert next(tmp_path.glob("*.jsonl")).read_bytes() == before  # nothing torn left behind
    monkeypatch.undo()  # space is freed
    kept = feedback_events(chunk_ids=ids[1:2], useful=True, caller="c1", **common)
    assert writer.write_through(kept, wait_s=1, queue=False, sync=True) is True
    events, signals = day(tmp_path)
    assert events.malformed == 0
    assert signals["chunk_usage"][ids[1]]["useful_evidence"] == 1.0
    assert signals["chunk_usage"][ids[0]]["useful_evidence"] == 0.0  # the refused one: never acknowledged


def test_a_failed_sync_is_a_failed_write(tmp_path, monkeypatch):
    """A full disk may only say so at ``fdatasync`` (delayed allocation): /feedback's write fails then, whole."""
    writer = TraceWriter(tmp_path)
    assert writer.write([{"timestamp": "2026-01-01T00:00:00Z", "event": "retrieval", "n": 1}])
    before = next(tmp_path.glob("*.jsonl")).read_bytes()

    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fdatasync", no_space)
    assert writer.write_through([{"n": 2}], wait_s=1, queue=False, sync=True) is False
    assert writer.write([{"n": 3}]) is True  # without sync: no fdatasync
    assert [e["n"] for e in lines(tmp_path)] == [1, 3] and before in next(tmp_path.glob("*.jsonl")).read_bytes()


def test_a_torn_line_left_by_a_killed_writer_is_cut_before_the_next_append(tmp_path: Path):
    writer = TraceWriter(tmp_path)
    path = writer.path_for(today().isoformat())
    tmp_path.mkdir(exist_ok=True)
    whole = json.dumps({"timestamp": f"{today()}T00:00:01Z", "event": "retrieval", "trace_id": "t", "chunk_id": "c"})
    path.write_text(whole + "\n" + whole[:40])  # the writer died 40 bytes into its line
    assert writer.write([{"timestamp": f"{today()}T00:00:02Z", "event": "retrieval", "trace_id": "u", "chunk_id": "d"}])
    assert [e["trace_id"] for e in lines(tmp_path)] == ["t", "u"]
    assert read_day(tmp_path, today(), UTC).malformed == 0


def test_the_rollup_keeps_an_event_glued_to_a_torn_line_and_the_lines_after_it(tmp_path: Path):
    """Files damaged before the fix: a torn line with the next event glued to it. The torn part is counted as
    malformed, the event and every line after it are kept."""
    ids = chunk_ids(2)
    trace_id, events = request_events(ids)
    verdicts = [verdict(trace_id, [c], f"c{n}")[0] for n, c in enumerate(ids)]
    dump = [json.dumps(e, ensure_ascii=False) for e in [*events, *verdicts]]
    torn = dump[2][:57]
    (tmp_path / f"{today()}-host-1.jsonl").write_text(
        "\n".join([dump[0], dump[1], torn + dump[2], dump[3], "{not json"]) + "\n"
    )
    found, signals = day(tmp_path)
    assert found.malformed == 2 and "torn" in found.examples[0] and "not JSON" in found.examples[1]
    assert [signals["chunk_usage"][c]["useful_evidence"] for c in ids] == [1.0, 1.0]


def test_trace_lines_written_before_issue_33_still_roll_up_with_new_ones(tmp_path: Path):
    """Old lines name the trace by its whole signed id and repeat the query and the related chunks in every event;
    they roll up as before, and a verdict written now on an answer traced then still finds its chunks."""
    ids = chunk_ids(3)
    trace_id = SIGNER.issue(role="public", index_version=VERSION, chunk_ids=ids)
    old = [
        {"timestamp": f"{today()}T00:00:01Z", "event": "retrieval", "trace_id": trace_id, "chunk_id": c,
         "query": "old question", "breath_phase": "Δ2", "agent": "serving", "role": "public", "useful": None,
         "index_version": VERSION, "rank": rank, "score": 0.5,
         "context": {"related_chunks": [x for x in ids if x != c], "mode": "hybrid", "cache_hit": False}}
        for rank, c in enumerate(ids, start=1)
    ]  # fmt: skip
    old_verdict = {**old[0], "event": "feedback", "useful": True, "query": None, "chunk_id": ids[0]}
    (tmp_path / f"{today()}-old-1.jsonl").write_text("".join(json.dumps(e) + "\n" for e in [*old, old_verdict]))
    new = verdict(trace_id, [], "c9")
    TraceWriter(tmp_path, name="new").write(new)
    events, signals = day(tmp_path)
    assert events.malformed == 0 and {t for t, *_ in events.retrievals} == {trace_key(trace_id)}
    usage = {c: signals["chunk_usage"][c]["useful_evidence"] for c in ids}
    assert usage == {ids[0]: pytest.approx(1 + 1 / 3), ids[1]: pytest.approx(1 / 3), ids[2]: pytest.approx(1 / 3)}
    assert signals["chunk_usage"][ids[0]]["breath_phases"] == {"Δ2": 1}
    assert {q for _, q, _ in confirmations(events)} == {"old question"}


def test_fifty_query_and_feedback_pairs_from_one_caller_are_one_verdict(tmp_path: Path):
    """Weak point of issue 33: every anonymous /query mints a signed trace, so N query + feedback pairs were N
    verdicts. Now one verdict per (caller, chunk, day) counts, the caller's last; another caller adds one more."""
    ids = chunk_ids(5)
    writer = TraceWriter(tmp_path)
    for n in range(50):
        trace_id, events = request_events(ids, query=f"heating help {n}")
        writer.write(events)
        writer.write(verdict(trace_id, [ids[2]], "anonymous-a"))
    events, signals = day(tmp_path)
    assert signals["chunk_usage"][ids[2]]["useful_evidence"] == 1.0
    assert signals["chunk_usage"][ids[2]]["confirmed_useful"] == 1
    # every question it was confirmed for is remembered, sharing the one judgement's evidence
    found = confirmations(events)
    assert {q for _, q, _ in found} == {f"heating help {n}" for n in range(50)}
    assert sum(w for _, _, w in found) == pytest.approx(1.0)
    trace_id, events = request_events(ids)
    writer.write(events)
    for useful in (False, True):  # another caller changes its mind: its last verdict counts
        writer.write(verdict(trace_id, [ids[2]], "anonymous-b", useful))
    _, signals = day(tmp_path)
    assert signals["chunk_usage"][ids[2]]["useful_evidence"] == 2.0
    assert signals["chunk_usage"][ids[2]]["not_useful_evidence"] == 0.0


def test_caller_tags_are_keyed_and_stable():
    other = TraceSigner(b"another secret of at least 16 bytes")
    tag = SIGNER.caller_tag("addr:203.0.113.9")
    assert tag == SIGNER.caller_tag("addr:203.0.113.9") and len(tag) == 16
    assert tag != SIGNER.caller_tag("addr:203.0.113.10") and tag != other.caller_tag("addr:203.0.113.9")
    assert "203.0.113.9" not in tag
