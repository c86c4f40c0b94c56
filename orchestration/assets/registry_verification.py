"""The local_resources registry → verified registry, issues and history in a new index version → publish.

Assets:
- ``registry/local_resources``  observable source asset: data version = the file's sha256 or the Postgres table's
  checksum, so the UI shows when the published registry is behind its source.
- ``registry_verification``     verifies every row (named rules; bad rows never stop good ones) and stages a new
  index version carrying the tables ``registry``, ``registry_issues`` and ``registry_history``. Nothing is staged
  when the input, the configuration and the verified result are those of the current version.
- ``registry_published``        switches ``CURRENT`` to the staged version (atomic) once the blocking checks pass.
"""

import warnings
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetKey,
    AssetSelection,
    BetaWarning,
    DataVersion,
    MetadataValue,
    ObserveResult,
    Output,
    asset_check,
    define_asset_job,
    in_process_executor,
    observable_source_asset,
)

from livemem import registry
from livemem.settings import RegistrySettings
from livemem.sources.config import SourcesConfig
from livemem.version.staging import CheckOutcome
from orchestration.assets.answer_gate import answer_gate_check
from orchestration.assets.publishing import check_result, publish_asset, staged_output, staging_asset
from orchestration.resources import IndexStoreResource
from orchestration.resources.registry import RegistrySourceResource

GROUP = "living_memory"
SOURCE_KEY = AssetKey(["registry", "local_resources"])
ASSET_NAMES = ("registry_verification", "registry_published")


def _observable_registry() -> Any:
    @observable_source_asset(
        key=SOURCE_KEY,
        group_name="sources",
        description="The local_resources registry input (data version = file sha256 or Postgres table checksum).",
    )
    def _observe(registry_source: RegistrySourceResource) -> ObserveResult:
        cfg = registry_source.config()
        if cfg is None:
            return ObserveResult(data_version=DataVersion("not-configured"), metadata={"source": "not configured"})
        version = registry.input_version(cfg)
        return ObserveResult(data_version=DataVersion(version), metadata={"source": cfg.describe(), "hash": version})

    return _observe


def _issues_table(by_rule: dict[str, dict[str, int]]) -> str:
    lines = ["| rule | errors | warnings | info | what it checks |", "|---|---|---|---|---|"]
    for rule, what in registry.RULES.items():
        found = by_rule.get(rule, {})
        lines.append(
            f"| {rule} | {found.get('error', 0)} | {found.get('warning', 0)} | {found.get('info', 0)} | {what} |"
        )
    return "\n".join(lines)


def _preview(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no issues"
    lines = ["| row | local_resource_id | rule | severity | message |", "|---|---|---|---|---|"]
    for r in rows:
        message = str(r["message"]).replace("|", "\\|")
        lines.append(
            f"| {r['source_row']} | {r['local_resource_id'] or ''} | {r['rule']} | {r['severity']} | {message} |"
        )
    return "\n".join(lines)


def _metadata(run: registry.RegistryRun) -> dict[str, Any]:
    counts = run.counts
    meta: dict[str, Any] = {
        "status": run.reason,
        "version_id": run.version_id or "",
        "base_version": run.base_version or "",
        "source": run.source,
        "input_hash": run.manifest_section.get("input_hash", ""),
        "dagster/row_count": counts.get("published", 0),
        "rows_read": counts.get("rows_read", 0),
        "rows_published": counts.get("published", 0),
        "rows_verified": counts.get("verified", 0),
        "rows_stale": counts.get("stale", 0),
        "rows_unverified": counts.get("unverified", 0),
        "rows_invalid": counts.get("invalid", 0),
        "rows_deprecated": counts.get("deprecated", 0),
        "rows_undated": counts.get("undated", 0),
        "rows_as_listed": counts.get("as_listed", 0),
        "rows_with_flagged_fields": counts.get("flagged_rows", 0),
        "fields_flagged": run.manifest_section.get("flagged_fields") or {},
        "undated_policy": run.manifest_section.get("undated_policy", "hidden"),
        "issues_by_rule": MetadataValue.md(_issues_table(run.issues_by_rule)),
        "issues_preview": MetadataValue.md(_preview(run.issues_preview)),
        "timings_s": run.timings,
    }
    if run.history:
        meta["history_changes"] = run.history
    if advice := registry.undated_advice(run.manifest_section):
        meta["undated_rows"] = advice
    if run.manifest_section.get("ignored_fields"):
        meta["ignored_fields"] = run.manifest_section["ignored_fields"]
    return meta


def stage_registry(
    context: AssetExecutionContext, registry_source: RegistrySourceResource, index_store: IndexStoreResource
) -> Output[dict[str, Any]]:
    """The body of ``registry_verification``: verify every row and stage a version with the registry tables."""
    home = index_store.home()
    run = registry.run_verification(registry_source.require(), home, limits=RegistrySettings.from_env())
    context.log.info(run.reason if not run.staged else f"staged version {run.version_id}")
    return staged_output(context, home, run.version_id, run.base_version, run.reason, _metadata(run))


def _version(index_store: IndexStoreResource, staged: dict[str, Any]):
    """The staged version (else the current one) and its manifest's registry section; (None, None) when empty."""
    home = index_store.home()
    version = staged["version_id"] or home.current()
    if version is None:
        return None, None
    return home.locate(version), home.manifest(version).get("registry")


def invalid_share(staged: dict[str, Any], index_store: IndexStoreResource) -> AssetCheckResult:
    """The body of ``registry_invalid_share``."""
    _, section = _version(index_store, staged)
    return check_result(registry.check_invalid_share(section))


def references_resolve(staged: dict[str, Any], index_store: IndexStoreResource) -> AssetCheckResult:
    """The body of ``registry_references_resolve``."""
    version_dir, _ = _version(index_store, staged)
    if version_dir is None:
        return check_result(CheckOutcome(True, "index is empty"))
    return check_result(registry.check_references(version_dir))


def rows_fresh(staged: dict[str, Any], index_store: IndexStoreResource) -> AssetCheckResult:
    """The body of ``registry_rows_fresh`` (WARN)."""
    version_dir, section = _version(index_store, staged)
    if version_dir is None:
        return check_result(CheckOutcome(True, "index is empty"), AssetCheckSeverity.WARN)
    return check_result(registry.check_stale(version_dir, section), AssetCheckSeverity.WARN)


def _verification_asset(cfg: registry.RegistryConfig | None) -> Any:
    """The ``registry_verification`` staging asset, described with where its rows come from."""
    where = cfg.describe() if cfg else "the sources file's registry section (none configured yet)"

    @staging_asset(
        name="registry_verification",
        pool="index_writer",
        group_name=GROUP,
        kinds={"duckdb", "postgres" if cfg and cfg.kind == "postgres" else "csv"},
        code_version=registry.LOGIC_VERSION,
        deps=[SOURCE_KEY],
        description=(
            f"Verifies the local_resources registry ({where}) row by row and stages a new index version with the "
            "tables registry (published slice), registry_issues and registry_history."
        ),
    )
    def registry_verification(
        context: AssetExecutionContext, registry_source: RegistrySourceResource, index_store: IndexStoreResource
    ) -> Output[dict[str, Any]]:
        return stage_registry(context, registry_source, index_store)

    return registry_verification


def _registry_checks(registry_verification: Any) -> list[Any]:
    """The checks of a verification: invalid share and references (blocking), fresh rows (WARN)."""

    @asset_check(
        asset=registry_verification,
        blocking=True,
        description="The share of invalid rows is at most registry.max_invalid_share (and the source has rows).",
    )
    def registry_invalid_share(
        registry_verification: dict[str, Any], index_store: IndexStoreResource
    ) -> AssetCheckResult:
        return invalid_share(registry_verification, index_store)

    @asset_check(
        asset=registry_verification,
        blocking=True,
        description="Every local_resource_id in chunk or GBIM entity metadata is in the registry.",
    )
    def registry_references_resolve(
        registry_verification: dict[str, Any], index_store: IndexStoreResource
    ) -> AssetCheckResult:
        return references_resolve(registry_verification, index_store)

    @asset_check(
        asset=registry_verification,
        description="No published row is stale or hidden for want of a verification date (WARN: such rows are served "
        "only when a caller asks for them; the check says how to get them verified).",
    )
    def registry_rows_fresh(registry_verification: dict[str, Any], index_store: IndexStoreResource) -> AssetCheckResult:
        return rows_fresh(registry_verification, index_store)

    return [registry_invalid_share, registry_references_resolve, registry_rows_fresh]


def build_registry_assets(config: SourcesConfig) -> tuple[list[Any], list[Any]]:
    """The registry's source asset, verification and publish assets, and their checks."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BetaWarning)
        source_asset = _observable_registry()
    registry_verification = _verification_asset(registry.RegistryConfig.from_sources(config))
    checks = _registry_checks(registry_verification)
    checks.append(answer_gate_check(registry_verification, "registry_verification"))  # eval.suite: no worse
    registry_published = publish_asset(
        name="registry_published",
        staging="registry_verification",
        description="The index version named by CURRENT after a registry verification: switched atomically to the "
        "staged version once the blocking checks pass.",
        group_name=GROUP,
        checks=checks,
        row_count=lambda m: (m.get("registry") or {}).get("published", 0),
        retention_from="registry_source",
    )
    assets = [source_asset, registry_verification, registry_published]
    return assets, checks


def registry_job() -> Any:
    """``verify_registry``: verify, check and publish the registry (one process, like ``build_index``)."""
    return define_asset_job(
        "verify_registry",
        selection=AssetSelection.assets(*ASSET_NAMES),
        description="Verify the local_resources registry, run its checks and publish a new index version.",
        executor_def=in_process_executor,
    )
