"""Git sources → chunks with provenance and seal state → embeddings → a checked, published index version.

Assets:
- ``git/<source>``  observable source asset per configured source; its data version is the HEAD commit, so the
  UI shows when the index is behind a repository.
- ``chunks``        stages a new index version (incremental: only changed files are re-chunked, only new text
  is embedded). Blocking checks run against the staged version.
- ``published_index`` switches ``CURRENT`` to the staged version (atomic), only when every blocking check passed.
"""

import warnings
from typing import Any

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetKey,
    BetaWarning,
    DataVersion,
    MetadataValue,
    ObserveResult,
    Output,
    asset_check,
    observable_source_asset,
)

from livemem.ingest import checks
from livemem.ingest.build import BuildResult, build_version
from livemem.ingest.progress import Progress
from livemem.ingest.verify import rebuild_and_compare
from livemem.settings import BuildSettings
from livemem.sources.config import CHUNKER_VERSION, SourcesConfig
from livemem.sources.gitsource import GitSource
from orchestration.assets.answer_gate import answer_gate_check
from orchestration.assets.publishing import check_result, publish_asset, staged_output, staging_asset
from orchestration.resources import EmbedderResource, GitSourcesResource, IndexStoreResource

GROUP = "living_memory"
REBUILD_CHECK = "published_index_matches_rebuild"


def source_key(name: str) -> AssetKey:
    return AssetKey(["git", name])


def _source_asset(name: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BetaWarning)
        return _observable_head(name)


def _observable_head(name: str) -> Any:
    @observable_source_asset(
        key=source_key(name),
        group_name="sources",
        description=f"HEAD of the git source {name!r} (data version = commit id).",
    )
    def _observe(git_sources: GitSourcesResource) -> ObserveResult:
        src = git_sources.load().source(name)
        with GitSource(src.repo, name) as repo:
            commit = repo.resolve(src.ref)
            head = repo.repo.commit(commit)
            return ObserveResult(
                data_version=DataVersion(commit),
                metadata={
                    "repo": str(src.repo),
                    "ref": src.ref,
                    "commit": commit,
                    "committed_at": head.committed_datetime.isoformat(),
                    "message": head.summary if isinstance(head.summary, str) else head.summary.decode(),
                },
            )

    return _observe


def _build_metadata(result: BuildResult) -> dict[str, Any]:
    rows = [
        "| source | commit | files new / changed / unchanged / deleted | chunks new / changed / unchanged / deleted"
        " | skipped |",
        "|---|---|---|---|---|",
    ]
    counters: tuple[str, ...] = ("files_new", "files_changed", "files_unchanged", "files_deleted")
    counters += ("chunks_new", "chunks_changed", "chunks_unchanged", "chunks_deleted")
    totals = dict.fromkeys(counters, 0)
    for name, st in result.sources.items():
        for key in totals:
            totals[key] += getattr(st, key)
        commit = (st.head_commit or "")[:12] if not st.error else f"unreadable: {st.error}"
        skipped = ", ".join(f"{k}: {v}" for k, v in st.skipped.items()) or "-"
        rows.append(
            f"| {name} | {commit} | {st.files_new} / {st.files_changed} / {st.files_unchanged} / {st.files_deleted}"
            f" | {st.chunks_new} / {st.chunks_changed} / {st.chunks_unchanged} / {st.chunks_deleted} | {skipped} |"
        )
    meta: dict[str, Any] = {
        "status": result.reason,
        "version_id": result.version_id or "",
        "base_version": result.base_version or "",
        "commits": {name: st.head_commit for name, st in result.sources.items()},
        "embeddings_computed": result.embeddings_computed,
        "embeddings_reused": result.embeddings_reused,
        "timings_s": result.timings,
        "sources": MetadataValue.md("\n".join(rows)),
        **{key: value for key, value in totals.items()},
    }
    if result.manifest:
        meta["dagster/row_count"] = result.manifest["total_chunks"]
        meta["sealed_chunks"] = result.manifest["sealed_chunks"]
        meta["index_size_mb"] = result.manifest["index_size_mb"]
        meta["breath"] = (
            f"{result.manifest['breath_at_update']['phase']} ({result.manifest['breath_at_update']['tone']})"
        )
        changed = [f"{n}: {p}" for n, st in result.sources.items() for p in st.changed_paths][:50]
        deleted = [f"{n}: {p}" for n, st in result.sources.items() for p in st.deleted_paths][:50]
        if changed or deleted:
            meta["changed_files"] = MetadataValue.md(
                "\n".join([*(f"- changed `{c}`" for c in changed), *(f"- deleted `{d}`" for d in deleted)])
            )
    return meta


NOTHING_STAGED = "nothing staged: the current version was checked when published"


def stage_chunks(
    context: AssetExecutionContext,
    git_sources: GitSourcesResource,
    index_store: IndexStoreResource,
    embedder: EmbedderResource,
) -> Output[dict[str, Any]]:
    """The body of ``chunks``: build and stage a new index version, with the metadata the UI shows."""
    home = index_store.home()
    settings = BuildSettings.from_env()  # read once here, passed down to the read and extraction workers
    progress = Progress(context.log.info, settings.progress_interval_s)
    result = build_version(git_sources.load(), home, embedder.embedder(), progress=progress, settings=settings)
    context.log.info(result.reason if not result.staged else f"staged version {result.version_id}")
    meta = _build_metadata(result)
    if progress.steps:  # what embedding took: counts, seconds, rate
        meta["embedding"] = progress.summary()
    return staged_output(context, home, result.version_id, result.base_version, result.reason, meta)


def _staged_dir(index_store: IndexStoreResource, staged: dict[str, Any]):
    """The staged version to check; (None, None) when nothing was staged (the current one passed at publish)."""
    home = index_store.home()
    version = staged["version_id"]
    return (home.locate(version), home.manifest(version)) if version else (None, None)


def staged_schema_valid(staged: dict[str, Any], index_store: IndexStoreResource) -> AssetCheckResult:
    """The body of ``chunks_schema_valid``."""
    version_dir, _ = _staged_dir(index_store, staged)
    if version_dir is None:
        return check_result(checks.CheckOutcome(True, NOTHING_STAGED))
    return check_result(checks.check_chunks_schema(version_dir))


def staged_provenance_resolves(staged: dict[str, Any], index_store: IndexStoreResource) -> AssetCheckResult:
    """The body of ``sealed_provenance_resolves``."""
    version_dir, manifest = _staged_dir(index_store, staged)
    if version_dir is None:
        return check_result(checks.CheckOutcome(True, NOTHING_STAGED))
    return check_result(checks.check_sealed_provenance(version_dir, manifest))


def staged_within_caps(staged: dict[str, Any], index_store: IndexStoreResource) -> AssetCheckResult:
    """The body of ``governance_caps``."""
    _, manifest = _staged_dir(index_store, staged)
    if manifest is None:
        return check_result(checks.CheckOutcome(True, NOTHING_STAGED))
    return check_result(checks.check_governance(manifest))


def staged_complete(
    staged: dict[str, Any], index_store: IndexStoreResource, git_sources: GitSourcesResource
) -> AssetCheckResult:
    """The body of ``index_complete``: the staged version against its sources (and its base's chunk ids)."""
    version_dir, manifest = _staged_dir(index_store, staged)
    if version_dir is None:
        return check_result(checks.CheckOutcome(True, NOTHING_STAGED))
    home = index_store.home()
    base = manifest.get("base_version")
    base_dir = home.version_dir(base) if base and home.version_dir(base).is_dir() else None
    return check_result(checks.check_index_complete(version_dir, manifest, git_sources.load(), base_dir))


def staged_readable(staged: dict[str, Any], index_store: IndexStoreResource) -> AssetCheckResult:
    """The body of ``sources_readable`` (WARN)."""
    _, manifest = _staged_dir(index_store, staged)
    if manifest is None:
        return check_result(checks.CheckOutcome(True, NOTHING_STAGED))
    return check_result(checks.check_sources_readable(manifest), AssetCheckSeverity.WARN)


def published_matches_rebuild(
    context: AssetCheckExecutionContext,
    git_sources: GitSourcesResource,
    index_store: IndexStoreResource,
    embedder: EmbedderResource,
) -> AssetCheckResult:
    """The body of ``published_index_matches_rebuild``: the published version against a from-scratch build."""
    home = index_store.home()
    if home.current() is None:
        return check_result(checks.CheckOutcome(True, "nothing published yet"))
    report = rebuild_and_compare(git_sources.load(), home, embedder.embedder())
    context.log.info(f"{report.version_id}: {report.comparison.summary()}")
    outcome = checks.CheckOutcome(
        report.equal,
        f"{report.version_id}: {report.comparison.summary()}",
        [*report.notes, *report.comparison.lines()],
        report.comparison.files_compared,
    )
    return check_result(outcome)


def _chunks_asset(config: SourcesConfig) -> Any:
    """The ``chunks`` staging asset, downstream of every configured source's HEAD."""

    @staging_asset(
        name="chunks",
        pool="index_writer",
        group_name=GROUP,
        kinds={"git", "duckdb", "chroma"},
        code_version=f"chunker-v{CHUNKER_VERSION}",  # the chunking rules (bumped when they change)
        deps=[source_key(src.name) for src in config.sources],
        description=(
            "Chunks of every configured git source at its HEAD, with provenance and seal state, embedded with "
            "all-MiniLM-L6-v2, staged as a new index version (only changed files are re-chunked)."
        ),
    )
    def chunks(
        context: AssetExecutionContext,
        git_sources: GitSourcesResource,
        index_store: IndexStoreResource,
        embedder: EmbedderResource,
    ) -> Output[dict[str, Any]]:
        return stage_chunks(context, git_sources, index_store, embedder)

    return chunks


def _record_checks(chunks: Any) -> list[Any]:
    """The blocking checks of the staged records: schema, sealed provenance, governance caps."""

    @asset_check(asset=chunks, blocking=True, description="Every chunk record is valid per schemas/chunk.schema.json.")
    def chunks_schema_valid(chunks: dict[str, Any], index_store: IndexStoreResource) -> AssetCheckResult:
        return staged_schema_valid(chunks, index_store)

    @asset_check(
        asset=chunks,
        blocking=True,
        description="Every SEALED chunk's commit exists and its file at that commit contains the chunk.",
    )
    def sealed_provenance_resolves(chunks: dict[str, Any], index_store: IndexStoreResource) -> AssetCheckResult:
        return staged_provenance_resolves(chunks, index_store)

    @asset_check(asset=chunks, blocking=True, description="The version respects the governance caps.")
    def governance_caps(chunks: dict[str, Any], index_store: IndexStoreResource) -> AssetCheckResult:
        return staged_within_caps(chunks, index_store)

    return [chunks_schema_valid, sealed_provenance_resolves, governance_caps]


def _source_checks(chunks: Any) -> list[Any]:
    """The checks of the staged version against its sources: complete (blocking), every source readable (WARN)."""

    @asset_check(
        asset=chunks,
        blocking=True,
        description=(
            "The staged version holds exactly its sources' files: every file a source selects at its commit has rows "
            "(or is reported skipped), nothing else does, and files unchanged since the base keep its chunk ids."
        ),
    )
    def index_complete(
        chunks: dict[str, Any], index_store: IndexStoreResource, git_sources: GitSourcesResource
    ) -> AssetCheckResult:
        return staged_complete(chunks, index_store, git_sources)

    @asset_check(asset=chunks, description="Every configured source could be read (WARN: old chunks are kept).")
    def sources_readable(chunks: dict[str, Any], index_store: IndexStoreResource) -> AssetCheckResult:
        return staged_readable(chunks, index_store)

    return [index_complete, sources_readable]


def _rebuild_check(published_index: Any) -> Any:
    """``published_index_matches_rebuild``: on demand (job verify_index) or weekly, not part of publishing."""

    @asset_check(
        asset=published_index,
        name=REBUILD_CHECK,
        description=(
            "The published version equals a from-scratch build of the same commits (rebuilt into a temporary home "
            "with the shared embedding cache). Run on demand (job verify_index) or by its weekly schedule."
        ),
    )
    def published_index_matches_rebuild(
        context: AssetCheckExecutionContext,
        git_sources: GitSourcesResource,
        index_store: IndexStoreResource,
        embedder: EmbedderResource,
    ) -> AssetCheckResult:
        return published_matches_rebuild(context, git_sources, index_store, embedder)

    return published_index_matches_rebuild


def build_chunk_assets(config: SourcesConfig) -> tuple[list[Any], list[Any]]:
    """The assets and checks of the chunk index for the sources named in ``config``."""
    source_assets = [_source_asset(src.name) for src in config.sources]
    chunks = _chunks_asset(config)
    # every blocking check of `chunks` (this list, whatever is added to it) must have passed in the publishing run
    asset_checks = [*_record_checks(chunks), *_source_checks(chunks)]
    asset_checks.append(answer_gate_check(chunks, "chunks"))  # the answer suite (eval.suite): no worse than published
    published_index = publish_asset(
        name="published_index",
        staging="chunks",
        description="The index version named by CURRENT: switched atomically to the staged version once checks pass.",
        group_name=GROUP,
        checks=asset_checks,
        row_count=lambda m: m["total_chunks"],
    )
    assets = [*source_assets, chunks, published_index]
    return assets, [*asset_checks, _rebuild_check(published_index)]
