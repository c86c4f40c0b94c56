"""What every step that stages an index version shares: turning a check outcome into an asset check result, and
the publish step (atomic switch of CURRENT, retention) with the metadata an auditor wants."""

from collections.abc import Callable
from typing import Any

from dagster import AssetCheckResult, AssetCheckSeverity, AssetExecutionContext, MetadataValue, Output

from livemem.checks import CheckOutcome
from livemem.store import IndexHome


def check_result(outcome: CheckOutcome, severity: AssetCheckSeverity = AssetCheckSeverity.ERROR) -> AssetCheckResult:
    """A check outcome as Dagster shows it: summary, number checked, the failures (capped) as a list."""
    meta: dict[str, Any] = {"summary": outcome.summary, "checked": outcome.checked}
    if outcome.failures:
        meta["failures"] = MetadataValue.md("\n".join(f"- {f}" for f in outcome.failures))
    return AssetCheckResult(passed=outcome.passed, severity=severity, metadata=meta, description=outcome.summary)


def publish_staged(
    context: AssetExecutionContext,
    staged: dict[str, Any],
    home: IndexHome,
    retention: int,
    row_count: Callable[[dict[str, Any]], int] | None = None,
) -> Output[str | None]:
    """Publish the version a staging step produced (``staged``: version_id, base_version, reason), or say why
    nothing changed. Runs only after the staging asset's blocking checks passed."""
    version = staged["version_id"]
    if version is None:
        current = home.current()
        context.log.info(f"nothing new to publish: {current} stays current ({staged['reason']})")
        return Output(current, metadata={"status": "unchanged", "current_version": current or ""})
    pruned = home.publish(version, staged["base_version"], retention)
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
