"""What every step that stages an index version shares: the staged value (run-scoped), turning a check outcome into
an asset check result, and the publish step (atomic switch of CURRENT, retention) with the metadata an auditor
wants.

A version is published only by the run that staged it, and only when every blocking check of the staging asset
evaluated and passed in that run: ``publish_staged`` reads both from the run's own event log, so neither another
run's output nor a check skipped by an asset selection can slip a version through.
"""

import warnings
from collections.abc import Callable, Iterable
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetKey,
    BetaWarning,
    DagsterEventType,
    Failure,
    MetadataValue,
    Output,
    asset,
)

from livemem.errors import LivingMemoryError
from livemem.ingest.checks import CheckOutcome
from livemem.version.store import IndexHome
from orchestration.resources.staged import StagedVersionIOManager


def staging_asset(**kwargs: Any) -> Callable[[Callable[..., Any]], Any]:
    """``@asset`` for a step that stages a version: its value (the staged version) is handed to its checks and
    publish step through ``StagedVersionIOManager``, i.e. only within the run that staged it."""

    def decorate(fn: Callable[..., Any]) -> Any:
        with warnings.catch_warnings():  # io_manager_def is a beta parameter; it keeps the IO manager on the asset
            warnings.simplefilter("ignore", BetaWarning)
            return asset(io_manager_def=StagedVersionIOManager(), **kwargs)(fn)

    return decorate


def check_result(outcome: CheckOutcome, severity: AssetCheckSeverity = AssetCheckSeverity.ERROR) -> AssetCheckResult:
    """A check outcome as Dagster shows it: summary, number checked, the failures (capped) as a list."""
    meta: dict[str, Any] = {"summary": outcome.summary, "checked": outcome.checked}
    if outcome.failures:
        meta["failures"] = MetadataValue.md("\n".join(f"- {f}" for f in outcome.failures))
    return AssetCheckResult(passed=outcome.passed, severity=severity, metadata=meta, description=outcome.summary)


def staged_output(
    context: AssetExecutionContext,
    home: IndexHome,
    version_id: str | None,
    base_version: str | None,
    reason: str,
    metadata: dict[str, Any],
) -> Output[dict[str, Any]]:
    """The output of a staging asset: the staged version (None: nothing staged), recorded in its manifest as this
    run's (``publish`` refuses it to any other run)."""
    if version_id is not None:
        home.record_staged_by(version_id, context.run_id)
    staged = {"version_id": version_id, "base_version": base_version, "reason": reason}
    return Output(staged, metadata={**metadata, "staged_by_run": context.run_id})


def blocking_check_names(checks: Iterable[Any]) -> frozenset[str]:
    """Names of the blocking checks among asset check definitions."""
    return frozenset(spec.name for c in checks for spec in c.check_specs if spec.blocking)


def _check_evaluations(context: AssetExecutionContext, asset_key: AssetKey, partition: str | None) -> dict[str, bool]:
    """check name → passed, for every evaluation of a check on ``asset_key`` in this run (the last one counts)."""
    records = context.instance.get_records_for_run(
        context.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION
    ).records
    passed: dict[str, bool] = {}
    for record in records:
        evaluation = record.event_log_entry.dagster_event.event_specific_data
        if evaluation.asset_key == asset_key and (partition is None or evaluation.partition in (None, partition)):
            passed[evaluation.check_name] = evaluation.passed
    return passed


def verify_checks_passed(context: AssetExecutionContext, staged: dict[str, Any], required: Iterable[str]) -> None:
    """Raise unless every check in ``required`` evaluated and passed in this run, on the asset that staged."""
    asset = staged["asset_key"]
    evaluations = _check_evaluations(context, AssetKey.from_user_string(asset), staged.get("partition"))
    missing = sorted(name for name in required if name not in evaluations)
    failed = sorted(name for name in required if evaluations.get(name) is False)
    if missing or failed:
        problems = [f"failed: {', '.join(failed)}"] if failed else []
        problems += [f"not evaluated in this run: {', '.join(missing)}"] if missing else []
        raise Failure(
            description=(
                f"version {staged['version_id']} is not published: its blocking checks on {asset} must all pass in "
                f"the run that staged it ({'; '.join(problems)}). Materialize {asset} with its checks again."
            )
        )


def publish_staged(
    context: AssetExecutionContext,
    staged: dict[str, Any],
    home: IndexHome,
    retention: int,
    required_checks: Iterable[str],
    row_count: Callable[[dict[str, Any]], int] | None = None,
) -> Output[str | None]:
    """Publish the version a staging step of this run produced (``staged``: version_id, base_version, reason, from
    ``StagedVersionIOManager``), once ``verify_checks_passed``; or say why nothing changed."""
    version = staged["version_id"]
    if version is None:
        current = home.current()
        context.log.info(f"nothing new to publish: {current} stays current ({staged['reason']})")
        return Output(current, metadata={"status": "unchanged", "current_version": current or ""})
    verify_checks_passed(context, staged, required_checks)
    try:
        pruned = home.publish(version, staged["base_version"], retention, run_id=context.run_id)
    except LivingMemoryError as exc:
        raise Failure(description=str(exc)) from exc
    manifest = home.manifest(version)
    context.log.info(f"published {version}; pruned {pruned or 'nothing'}")
    metadata: dict[str, Any] = {
        "status": "published",
        "current_version": version,
        "previous_version": staged["base_version"] or "",
        "pruned_versions": pruned,
        "index_size_mb": manifest.get("index_size_mb", 0.0),
        "path": MetadataValue.path(str(home.version_dir(version))),
    }
    if row_count is not None:
        metadata["dagster/row_count"] = row_count(manifest)
    return Output(version, metadata=metadata)
