"""The versions benchmark (``bench.versions``) runs end to end on ~50 chunks with a short simulated year, so it
never rots before its big runs."""

from __future__ import annotations

import json
from pathlib import Path

from support.bench_input import write_corpus

from bench import versions


def test_versions_benchmark_measures_older_versions_and_a_short_year(tmp_path: Path) -> None:
    corpus, queries = write_corpus(tmp_path)
    output = tmp_path / "results" / "versions.json"
    argv = ["--sizes", "50", "--work", str(tmp_path / "work"), "--output", str(output), "--corpus", str(corpus)]
    assert versions.main([*argv, "--queries-file", str(queries), "--queries", "10", "--year-days", "15"]) == 0

    results = json.loads(output.read_text())
    assert results["embedder"]["stand_in"] and results["machine"]["nproc"] >= 1
    assert results["command"].endswith("--year-days 15")
    (size,) = results["sizes"]
    assert "error" not in size, size.get("error")
    v = size["versions"]
    assert len({v["v1_full_build"], v["v2_one_file_change"], v["v3_attention"]}) == 3

    # older versions opened in a worker holding CURRENT; a second request for one loads nothing
    serving = size["serving"]
    assert serving["open_current"]["version"] == v["v3_attention"]
    assert [o["version"] for o in serving["open_older"]] == [v["v1_full_build"], v["v2_one_file_change"]]
    assert all(o["chunks"] == size["chunks"] and o["s"] > 0 for o in serving["open_older"])
    assert serving["first_open_writing_serving_copies_s"] > 0 and all(
        "anon_added_kib" in o for o in serving["open_older"]
    )
    assert serving["older_loads"] == 2 and serving["open_older_again_s"] < serving["open_older"][0]["s"]
    for side in ("current", "older"):
        assert serving["queries"][side]["n"] == 10
    assert serving["older_over_current_p50"] > 0
    assert "attention moved" in size["diffs"]["attention_publish"]["summary"]

    # a short year: 15 nightly publishes and 2 weekly changes, each published at its simulated time
    year = size["year"]
    assert year["days"] == 15 and year["weekly_changes"] == 2 and year["publishes"] == 17
    assert year["kept"] + year["pruned"] == 3 + 17  # nothing lost: every version is kept or pruned by the policy
    assert year["disk"]["history_pct"] is not None and year["disk"]["current_mb"] > 0
    assert set(size["targets"]) >= {"open_older_s", "older_over_current_p50", "year_history_pct"}
    assert size["targets"]["at_target_size"] is False

    report = output.with_suffix(".md").read_text()
    assert "STAND-IN" in report and "A simulated year" in report and f"| {size['chunks']:,} |" in report
    assert results["command"] in report
