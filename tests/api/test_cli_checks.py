"""`livemem materialize` (`make materialize`) ends with a summary of every check that failed, and exits 1 only when
a run failed (a blocking check) or an ERROR-severity check failed (issue 49: a failed non-blocking check was buried
in the log). On small jobs standing in for the product's, through the real command."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetSelection,
    Definitions,
    asset,
    asset_check,
    define_asset_job,
)
from typer.testing import CliRunner

import orchestration.definitions
from orchestration.cli import app


@asset
def registry_rows() -> int:
    return 3


@asset_check(asset=registry_rows, description="No published row is stale (WARN).")
def rows_fresh() -> AssetCheckResult:
    return AssetCheckResult(
        passed=False, severity=AssetCheckSeverity.WARN, description="2 of 3 rows are stale",
        metadata={"stale_rows": 2, "how": "verify them"},
    )  # fmt: skip


@asset_check(asset=registry_rows, description="Rows have ids.")
def rows_have_ids() -> AssetCheckResult:
    return AssetCheckResult(passed=True)


@asset
def entities() -> int:
    return 1


@asset_check(asset=entities, description="Entities readable (ERROR, not blocking).")
def entities_readable() -> AssetCheckResult:
    return AssetCheckResult(passed=False, description="1 entity unreadable")


@asset
def chunks() -> int:
    return 2


@asset_check(asset=chunks, blocking=True, description="Schema valid (blocking).")
def chunks_valid() -> AssetCheckResult:
    return AssetCheckResult(passed=False, description="chunk 7 breaks the schema")


@asset(deps=[chunks])
def published() -> int:
    return 2


DEFS = Definitions(
    assets=[registry_rows, entities, chunks, published],
    asset_checks=[rows_fresh, rows_have_ids, entities_readable, chunks_valid],
    jobs=[
        define_asset_job("warn_job", AssetSelection.assets(registry_rows)),
        define_asset_job("error_job", AssetSelection.assets(entities)),
        define_asset_job("blocked_job", AssetSelection.assets(chunks, published)),
    ],
)


@pytest.fixture
def materialize(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.setattr(orchestration.definitions, "build_definitions", lambda *_: DEFS)

    def run(*jobs: str):
        args = [a for job in jobs for a in ("--job", job)]
        return CliRunner().invoke(app, ["--index-dir", str(tmp_path / "index"), "materialize", *args])

    return run


def test_a_failed_warn_check_is_summed_up_at_the_end_and_exits_0(materialize) -> None:
    ran = materialize("warn_job")
    assert ran.exit_code == 0, ran.output
    summary = ran.output[ran.output.index("checks that failed: 1") :]
    assert "WARN registry_rows / rows_fresh (non-blocking, warn_job): 2 of 3 rows are stale" in summary
    assert "stale_rows: 2" in summary and "how: verify them" in summary
    assert "rows_have_ids" not in summary  # passed checks are not in the summary


def test_every_job_of_make_materialize_in_one_summary_and_an_error_check_exits_1(materialize) -> None:
    ran = materialize("warn_job", "error_job")
    assert ran.exit_code == 1, ran.output
    summary = ran.output[ran.output.index("checks that failed: 2") :]
    assert "WARN registry_rows / rows_fresh (non-blocking, warn_job)" in summary
    assert "ERROR entities / entities_readable (non-blocking, error_job): 1 entity unreadable" in summary
    assert "1 ERROR check(s) failed: entities_readable" in ran.output


def test_a_blocking_check_stops_the_run_and_the_jobs_after_it(materialize) -> None:
    ran = materialize("blocked_job", "warn_job")
    assert ran.exit_code == 1, ran.output
    summary = ran.output[ran.output.index("checks that failed: 1") :]
    assert "ERROR chunks / chunks_valid (blocking, blocked_job): chunk 7 breaks the schema" in summary
    assert "blocked_job failed" in ran.output and "rows_fresh" not in ran.output  # warn_job never ran


def test_nothing_failed_says_so(materialize, monkeypatch: pytest.MonkeyPatch) -> None:
    quiet = Definitions(assets=[published], jobs=[define_asset_job("ok_job", AssetSelection.assets(published))])
    monkeypatch.setattr(orchestration.definitions, "build_definitions", lambda *_: quiet)
    ran = materialize("ok_job")
    assert ran.exit_code == 0 and "checks: none failed" in ran.output, ran.output
