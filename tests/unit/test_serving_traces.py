"""Trace files shared by several writer processes: every line whole and parseable, none lost."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

from support.locks import locks_held, trace_file_locked

from livemem.usage.traces import TraceWriter, retrieval_events

PROCESSES = 6
BATCHES = 150
IDS = [f"00000000-0000-4000-8000-{i:012d}" for i in range(8)]


def _write_batches(directory: str, writer_index: int) -> None:
    writer = TraceWriter(directory, name="shared")
    for batch in range(BATCHES):
        events = retrieval_events(
            trace_id=f"{writer_index}-{batch}",
            query="x" * (batch * 37 % 5000),  # batches of very different sizes, some larger than a page
            chunk_ids=IDS,
            scores=[1.0] * len(IDS),
            role="public",
            breath_phase="Δ1",
            index_version="v",
            mode="hybrid",
            return_="chunks",
            filters={},
            collections=["c"],
            cache_hit=False,
        )
        assert writer.write(events)


def test_concurrent_writer_processes_lose_and_interleave_no_lines(tmp_path: Path):
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_write_batches, args=(str(tmp_path), i)) for i in range(PROCESSES)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0
    files = list(tmp_path.glob("*-shared.jsonl"))
    assert len(files) == 1
    lines = files[0].read_text(encoding="utf-8").splitlines()
    assert len(lines) == PROCESSES * BATCHES * len(IDS)
    events = [json.loads(line) for line in lines]
    per_trace: dict[str, list[int]] = {}
    for event in events:
        per_trace.setdefault(event["trace_id"], []).append(event["rank"])
    assert len(per_trace) == PROCESSES * BATCHES
    # each request's events are one contiguous block, in rank order
    assert all(ranks == list(range(1, len(IDS) + 1)) for ranks in per_trace.values())
    blocks = [events[i]["trace_id"] for i in range(0, len(events), len(IDS))]
    assert len(set(blocks)) == len(blocks)


def test_each_process_writes_its_own_daily_file(tmp_path: Path):
    writer = TraceWriter(tmp_path)
    assert writer.write([{"event": "retrieval"}])
    (written,) = tmp_path.glob("*.jsonl")
    assert written.name.endswith(f"-{writer.host}-{os.getpid()}.jsonl")
    assert written.name[:10].count("-") == 2  # YYYY-MM-DD prefix


def _lines(directory: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(directory.glob("*.jsonl")) for line in f.read_text().splitlines()]


def test_queued_events_are_written_soon_and_a_direct_write_comes_after_them(tmp_path: Path):
    """/query queues its events (``submit``); /feedback writes at once (``write``): the file keeps the order in
    which they were answered, and what was queued reaches the file without anyone waiting for it."""
    writer = TraceWriter(tmp_path)
    writer.submit([{"event": "retrieval", "n": 1}, {"event": "retrieval", "n": 2}])
    writer.submit([{"event": "retrieval", "n": 3}])
    assert writer.write([{"event": "feedback", "n": 4}])
    assert [e["n"] for e in _lines(tmp_path)] == [1, 2, 3, 4]  # the queued events first, then the feedback
    writer.submit([{"event": "retrieval", "n": 5}])
    deadline = time.monotonic() + 10
    while len(_lines(tmp_path)) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [e["n"] for e in _lines(tmp_path)] == [1, 2, 3, 4, 5]
    assert writer.written == 5 and writer.failures == 0


def test_queued_events_are_on_disk_when_the_process_exits(tmp_path: Path):
    """A process that queues events and exits at once (no flush, no shutdown hook) still writes them all."""
    script = (
        "import sys; from livemem.usage.traces import TraceWriter\n"
        "writer = TraceWriter(sys.argv[1])\n"
        "for i in range(100): writer.submit([{'event': 'retrieval', 'n': i}])\n"
    )
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True, timeout=60)
    assert [e["n"] for e in _lines(tmp_path)] == list(range(100))


def test_write_through_writes_at_once_and_queues_only_behind_a_held_lock(tmp_path: Path):
    """Audit records (``write_through``): on disk when the call returns if the file is free; when another holder
    keeps it locked, the call gives up after ``wait_s`` and queues them, and they land, in order, once it is free."""
    writer = TraceWriter(tmp_path)
    writer.submit([{"n": 1}])
    assert writer.write_through([{"n": 2}], wait_s=0.2) is True
    assert [e["n"] for e in _lines(tmp_path)] == [1, 2]  # what was queued first, then the record, no flush needed

    with locks_held(trace_file_locked(writer)) as (answer, _):  # a call waiting for the file fails, not hangs
        writer.submit([{"n": 3}])  # the flusher thread takes it and waits for the file, holding the writer's lock
        assert answer(partial(writer.write_through, [{"n": 4}], 0.2)) is None  # queued
        time.sleep(0.1)
        assert answer(partial(writer.write_through, [{"n": 5}], 0.2)) is None
        assert answer(partial(writer.flush, 0.2)) is False  # a bounded flush gives up, keeps them
        assert [e["n"] for e in _lines(tmp_path)] == [1, 2]
    assert writer.flush()
    assert [e["n"] for e in _lines(tmp_path)] == [1, 2, 3, 4, 5] and writer.failures == 0


def test_a_full_queue_drops_and_counts_instead_of_growing_without_bound(tmp_path: Path):
    """A trace target that stays unwritable (here: its file locked elsewhere) must not grow the process without
    bound: past ``max_queued`` waiting events, blocks are dropped and counted; what was queued lands later, whole."""
    writer = TraceWriter(tmp_path)
    writer.max_queued = 5
    assert writer.write([{"n": 0}])
    with trace_file_locked(writer):
        for n in range(1, 17, 2):  # 16 events in blocks of two
            writer.submit([{"n": n}, {"n": n + 1}])
            time.sleep(0.05)  # the flusher may take what is queued, once, and wait for the file with it
        # at most 5 taken by the flusher (the queue never held more) and 5 queued: at least 6 dropped
        assert writer.dropped >= 6 and writer.failures >= 3
    assert writer.flush()
    written = [e["n"] for e in _lines(tmp_path)]
    assert written[0] == 0 and len(written) - 1 + writer.dropped == 16  # every event written or counted as dropped
    assert written == sorted(written)  # in order, blocks whole
