"""What every step that stages an index version shares: the staged value (run-scoped), turning a check outcome into
an asset check result, and the publish step (atomic switch of CURRENT, retention) with the metadata an auditor
wants: ``publish_asset`` makes it for a staging asset.

A version is published only by the run that staged it, and only when every blocking check of the staging asset
evaluated and passed in that run: ``publish_staged`` reads both from the run's own event log, so neither another
run's output nor a check skipped by an asset selection can slip a version through.
"""

import inspect
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
    PartitionsDefinition,
    asset,
)

from livemem.errors import LivingMemoryError
from livemem.version.diff import what_changed
from livemem.version.history import disk_usage
from livemem.version.staging import CheckOutcome
from livemem.version.store import IndexHome
from orchestration.resources import GitSourcesResource, IndexStoreResource
from orchestration.resources.registry import RegistrySourceResource
from orchestration.resources.staged import StagedVersionIOManager

# the resources whose sources file sets the retention of published versions: name → (class, its sources file)
_RETENTION_FROM: dict[str, tuple[type, Callable[[Any], Any]]] = {
    "git_sources": (GitSourcesResource, GitSourcesResource.load),
    "registry_source": (RegistrySourceResource, RegistrySourceResource.sources),
}


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
    after_publish: Callable[[IndexHome], Any] | None = None,
) -> Output[str | None]:
    """Publish the version a staging step of this run produced (``staged``: version_id, base_version, reason, from
    ``StagedVersionIOManager``), once ``verify_checks_passed``; or say why nothing changed. ``after_publish``: what
    the step does once its version is current (the attention rollup settles the state it staged)."""
    version = staged["version_id"]
    if version is None:
        current = home.current()
        context.log.info(f"nothing new to publish: {current} stays current ({staged['reason']})")
        return Output(current, metadata={"status": "unchanged", "current_version": current or ""})
    verify_checks_passed(context, staged, required_checks)
    changes = what_changed(home, staged["base_version"], version)  # before publishing: retention may prune the base
    try:
        pruned = home.publish(version, staged["base_version"], retention, run_id=context.run_id)
    except LivingMemoryError as exc:
        raise Failure(description=str(exc)) from exc
    if after_publish is not None:
        after_publish(home)
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
    # what changed in this build, against the version it was built on, and the disk kept versions take
    # (docs/versions.md, "Each publish says what changed")
    metadata["what_changed"] = changes["what_changed"]
    if "changes" in changes:
        metadata["changes"] = MetadataValue.json(changes["changes"])
    metadata["disk"] = MetadataValue.json(disk_usage(home))
    return Output(version, metadata=metadata)


def publish_asset(
    *,
    name: str,
    staging: str,
    description: str,
    group_name: str,
    checks: Iterable[Any],
    row_count: Callable[[dict[str, Any]], int],
    retention_from: str = "git_sources",
    partitions_def: PartitionsDefinition | None = None,
    after_publish: Callable[[IndexHome], Any] | None = None,
) -> Any:
    """The asset that publishes what the staging asset ``staging`` staged in this run (``publish_staged``), once
    every blocking check among ``checks`` passed; ``row_count``: its ``dagster/row_count`` from the manifest;
    ``retention_from``: the resource whose sources file sets the retention (``git_sources``, ``registry_source``).

    Its parameters are those a hand-written asset would have (context, the staged value named after ``staging``,
    the retention resource, ``index_store``), so Dagster sees the same input and resources."""
    resource_class, sources_of = _RETENTION_FROM[retention_from]
    required = blocking_check_names(checks)

    def publish(context: AssetExecutionContext, **kwargs: Any) -> Output[str | None]:
        retention = sources_of(kwargs[retention_from]).retention
        home = kwargs["index_store"].home()
        return publish_staged(context, kwargs[staging], home, retention, required, row_count, after_publish)

    keyword = inspect.Parameter.POSITIONAL_OR_KEYWORD
    publish.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter("context", keyword, annotation=AssetExecutionContext),
            inspect.Parameter(staging, keyword, annotation=dict[str, Any]),
            inspect.Parameter(retention_from, keyword, annotation=resource_class),
            inspect.Parameter("index_store", keyword, annotation=IndexStoreResource),
        ],
        return_annotation=Output[str | None],
    )
    publish.__name__ = publish.__qualname__ = name
    return asset(
        name=name,
        pool="index_writer",
        group_name=group_name,
        kinds={"filesystem"},
        description=description,
        partitions_def=partitions_def,
    )(publish)
