"""The rollup of a day that does not exist yet is refused before anything is written, and a rollup whose check
fails leaves nothing that blocks the days around it (real Dagster runs and the `livemem` CLI)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from dagster import DagsterInstance
from typer.testing import CliRunner

from livemem.ingest.build import build_version
from livemem.sources.config import load_sources
from livemem.usage.attention import state_dir
from livemem.version import connect
from livemem.version.staging import CheckOutcome
from livemem.version.store import IndexHome
from orchestration.assets import attention_rollup as rollup_module
from orchestration.cli import app
from orchestration.definitions import build_definitions

DOCS = {"guide.md": "# Guide\n\n## SNAP\n\nFood help in Oak Hill.\n\n## WIC\n\nNutrition for infants.\n"}


def confirmation(day: str, chunk: str) -> str:
    trace = str(uuid.uuid4())
    base = {"timestamp": f"{day}T12:00:00Z", "trace_id": trace, "chunk_id": chunk, "agent": "test", "role": "public",
            "breath_phase": None, "index_version": "v", "context": {"related_chunks": []}}  # fmt: skip
    return "".join(
        json.dumps({**base, **extra}) + "\n"
        for extra in ({"event": "retrieval", "query": "q", "useful": None}, {"event": "feedback", "useful": True})
    )


@pytest.fixture
def index(tmp_path: Path, make_repo, embedder):
    repo = make_repo(files=DOCS)
    sources = tmp_path / "sources.yaml"
    sources.write_text(f"sources:\n  - {{name: docs, repo: {repo.path}, collection: docs}}\n", encoding="utf-8")
    home = IndexHome(tmp_path / "index")
    result = build_version(load_sources(sources), home, embedder)
    home.publish(result.version_id, None, 10)
    return home, sources


def written(home: IndexHome) -> list[str]:
    """What a rollup leaves in the index home that later rollups read."""
    names = [p.name for p in state_dir(home).glob("*.parquet")] if state_dir(home).is_dir() else []
    return sorted(names + (["signals.json"] if (home.root / "signals.json").exists() else []))


def test_today_and_unknown_partitions_are_refused_with_the_valid_range(index, tmp_path: Path, monkeypatch) -> None:
    home, sources = index
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    today = datetime.now(UTC).date().isoformat()
    base = ["--sources", str(sources), "--index-dir", str(home.root), "materialize", "--job", "attention_rollup_job"]
    runner = CliRunner()
    for key in (today, "2026-13-40", "yesterday"):
        refused = runner.invoke(app, [*base, "--partition", key])
        assert refused.exit_code == 2, refused.output
        assert refused.exception is None or isinstance(refused.exception, SystemExit)  # no traceback
        lines = refused.output.strip().splitlines()
        assert len(lines) == 1, refused.output
        assert f"attention_rollup_job has no partition '{key}'; partitions: 2026-01-01 … " in lines[0]
        assert "(UTC; a day exists once it has ended there)" in lines[0]
    missing = runner.invoke(app, [*base])
    assert missing.exit_code == 2 and "is partitioned: name one with --partition" in missing.output
    unpartitioned = runner.invoke(app, [*base[:-1], "observe_sources", "--partition", "2026-03-01"])
    assert unpartitioned.exit_code == 2 and "observe_sources is not partitioned" in unpartitioned.output
    assert written(home) == []
    ran = runner.invoke(app, [*base, "--partition", "2026-03-01"])  # a day that has ended runs
    assert ran.exit_code == 0, ran.output
    assert "attention_rollup: attention unchanged by 2026-03-01" in ran.output and " - DEBUG - " not in ran.output
    assert written(home) == [
        "2026-03-01.parquet", "2026-03-01.questions.parquet", "2026-03-01.related.parquet", "signals.json"
    ]  # fmt: skip
    for path in [*state_dir(home).glob("*.parquet"), home.root / "signals.json"]:
        path.unlink()

    # `dagster job execute --tags '{"dagster/partition": today}'` (the README's manual run) skips Dagster's own
    # validation: the asset refuses the day before reading or writing anything
    job = build_definitions(sources, home.root).resolve_job_def("attention_rollup_job")
    result = job.execute_in_process(
        instance=DagsterInstance.ephemeral(), tags={"dagster/partition": today}, raise_on_error=False
    )
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert f"no partition '{today}'" in failure.step_failure_data.error.message
    assert "Nothing was read or written" in failure.step_failure_data.error.message
    assert written(home) == []


def test_a_rollup_whose_check_fails_blocks_no_other_day(index, monkeypatch) -> None:
    home, sources = index
    con = connect(home.version_dir(home.current()))
    chunk = con.execute("SELECT chunk_id FROM chunks ORDER BY chunk_id LIMIT 1").fetchone()[0]
    con.close()
    for day in ("2026-03-01", "2026-03-02"):
        home.traces.mkdir(parents=True, exist_ok=True)
        (home.traces / f"{day}-host-1.jsonl").write_text(confirmation(day, chunk), encoding="utf-8")
    job = build_definitions(sources, home.root).resolve_job_def("attention_rollup_job")
    instance = DagsterInstance.ephemeral()
    published = home.current()

    real_check = rollup_module.checks.check_attention
    monkeypatch.setattr(rollup_module.checks, "check_attention", lambda d: CheckOutcome(False, "broken on purpose"))
    failed = job.execute_in_process(instance=instance, partition_key="2026-03-02", raise_on_error=False)
    assert not failed.success and home.current() == published
    assert written(home) == []  # its state waits beside the staged version; nothing later days read

    monkeypatch.setattr(rollup_module.checks, "check_attention", real_check)
    first = job.execute_in_process(instance=instance, partition_key="2026-03-01")
    assert first.success and home.current() != published  # not "later days were rolled up already"
    statuses = [e.materialization.metadata["status"].value for e in first.get_asset_materialization_events()]
    assert statuses == ["staged", "published"]
    second = job.execute_in_process(instance=instance, partition_key="2026-03-02")
    assert second.success
    assert home.current_manifest()["attention"]["last_rollup_day"] == "2026-03-02"
    assert written(home) == sorted(
        [f"2026-03-0{d}{s}.parquet" for d in (1, 2) for s in ("", ".questions", ".related")] + ["signals.json"]
    )
    assert json.loads((home.root / "signals.json").read_text())["date"] == "2026-03-02"
