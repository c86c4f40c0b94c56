"""A version's attention and last breath are read for the chunks that have some (issue 38: a worker switch at 1M
rows looks up the few attended chunks, not every row of the version), with the same result either way."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest

from livemem.version import schema, signals
from livemem.version.signals import QuestionMemory, read_signals

pytestmark = pytest.mark.unit

IDS = [f"c-{i:03d}" for i in range(200)]  # the snapshot's rows, in order
ROW_OF = {c: i for i, c in enumerate(IDS)}
ATTENDED = [  # chunk, score, last breath: out of row order, one chunk twice (the last row counts), one gone
    ("c-150", 0.5, "Δ2"),
    ("c-003", 2.0, "Δ3"),
    ("gone", 9.0, "Δ1"),
    ("c-040", 1.0, None),
    ("c-150", 0.75, "Δ4"),
    ("c-199", 0.25, ""),
]


def read(path: Path):
    con = duckdb.connect(str(path), read_only=True)
    try:
        return read_signals(con, IDS, ROW_OF, QuestionMemory.empty)
    finally:
        con.close()


def test_attended_chunks_are_looked_up_with_the_same_result_as_every_row(tmp_path, monkeypatch) -> None:
    path = tmp_path / "tables.duckdb"
    con = duckdb.connect(str(path))
    con.execute(schema.create_sql("attention"))
    con.executemany("INSERT INTO attention VALUES (?, ?, ?)", ATTENDED)
    con.close()
    few = read(path)  # 6 rows for 200 chunks: each attended chunk looked up
    monkeypatch.setattr(signals, "FEW_ATTENDED", len(IDS))  # every row of the version looked up among them
    every = read(path)
    for found in (few, every):
        expected = np.zeros(len(IDS))
        expected[[150, 3, 40, 199]] = [0.75, 2.0, 1.0, 0.25]
        assert found.attention.tolist() == expected.tolist()
        assert {r: b for r, b in enumerate(found.last_breath) if b is not None} == {150: "Δ4", 3: "Δ3", 199: ""}
        assert found.breathed.tolist() == [3, 150]  # the rows with a last breath, ascending (none for "")
