"""The one Definitions object of the Living Memory code location.

The asset graph depends on which sources the sources file names (one observable asset per source), so the
file named by ``RAG_SOURCES`` (default: the bundled example) is read when the code location loads; a mistake
in it is reported with its file, line and column. Resources show their configuration: ``EnvVar`` for a variable
that is set (read when a run starts), else the settings tree's default (``orchestration.resources.from_env``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dagster import (
    AssetCheckKey,
    AssetKey,
    AssetSelection,
    Definitions,
    ScheduleDefinition,
    define_asset_job,
    multi_or_in_process_executor,
)

from livemem.model.embedding import DEFAULT_ENCODER
from livemem.registry import RegistryConfig
from livemem.settings import DEFAULT_INDEX_DIR, DEFAULT_SOURCES_FILE, PathSettings
from livemem.sources.config import SourcesConfig, load_sources
from orchestration.assets.attention_rollup import build_attention_assets
from orchestration.assets.chunks import REBUILD_CHECK, build_chunk_assets, source_key
from orchestration.assets.gbim_export import build_gbim_assets
from orchestration.assets.personal_memory import build_personal_memory_assets
from orchestration.assets.registry_verification import build_registry_assets, registry_job
from orchestration.resources import (
    EmbedderResource,
    GitSourcesResource,
    IndexStoreResource,
    SpatialDatabasesResource,
    TraceStoreResource,
    from_env,
)
from orchestration.resources.registry import RegistrySourceResource
from orchestration.schedules import ScheduleStatus

# One process by default: the model loads once and the light check steps do not each pay for a fresh interpreter.
# Scale-out deployments pick the multiprocess executor by run config: execution: {config: {multiprocess: {}}}.
IN_PROCESS_BY_DEFAULT: dict[str, Any] = {"execution": {"config": {"in_process": {}}}}


def build_definitions(
    sources_file: str | Path | None = None, index_dir: str | Path | None = None, schedules_off: list[str] | None = None
) -> Definitions:
    """Definitions for a sources file (default ``$RAG_SOURCES``) and index home (default ``$RAG_INDEX_DIR``);
    ``schedules_off``: schedules that start stopped (default ``$LIVEMEM_SCHEDULES_OFF``; orchestration/schedules.py)."""
    path = Path(sources_file) if sources_file else PathSettings.from_env().sources_file
    config = load_sources(path)
    status = ScheduleStatus(schedules_off)
    chunk_assets, chunk_checks = build_chunk_assets(config)
    attention_assets, attention_checks, attention_jobs, attention_schedules = build_attention_assets(config, status)
    gbim_assets, gbim_checks = build_gbim_assets(config)
    reg_assets, reg_checks = build_registry_assets(config)
    personal_assets, personal_checks, personal_jobs, personal_schedules = build_personal_memory_assets(status)
    rebuild_check = AssetSelection.checks(AssetCheckKey(AssetKey("published_index"), REBUILD_CHECK))
    verify_index = define_asset_job(
        "verify_index",
        selection=rebuild_check,
        description="Rebuild the commits the published version indexed from scratch and report any difference.",
    )
    build_index = define_asset_job(
        "build_index",
        selection=AssetSelection.assets("chunks", "published_index") - rebuild_check,
        description="Chunk, embed, check and publish a new index version.",
        executor_def=multi_or_in_process_executor,
        config=IN_PROCESS_BY_DEFAULT,
    )
    observe_sources = define_asset_job(
        "observe_sources",
        selection=AssetSelection.assets(*(source_key(src.name) for src in config.sources)),
        description="Record each source's HEAD commit (data version), so the UI shows when the index is behind.",
    )
    export_gbim = define_asset_job(
        "export_gbim",
        selection=AssetSelection.assets("gbim_export", "gbim_published"),
        description="Export the spatial sources as GBIM entities and relations, check and publish a new version.",
        executor_def=multi_or_in_process_executor,
        config=IN_PROCESS_BY_DEFAULT,
    )
    return Definitions(
        assets=[*chunk_assets, *attention_assets, *gbim_assets, *reg_assets, *personal_assets],
        asset_checks=[*chunk_checks, *attention_checks, *gbim_checks, *reg_checks, *personal_checks],
        jobs=[build_index, verify_index, observe_sources, export_gbim, registry_job(), *attention_jobs, *personal_jobs],
        schedules=[
            *attention_schedules,
            ScheduleDefinition(
                name="weekly_verify_index",
                job=verify_index,
                cron_schedule="0 4 * * 0",
                execution_timezone="UTC",
                description="Sundays 04:00 UTC: prove the published index equals a from-scratch build (stopped by default: orchestration/schedules.py).",
                default_status=status("weekly_verify_index"),
            ),
            *personal_schedules,
        ],
        resources=resources(config, sources_file, index_dir),
    )


def resources(config: SourcesConfig, sources_file: str | Path | None, index_dir: str | Path | None) -> dict[str, Any]:
    """The resources, each field the value given, else ``EnvVar`` of its variable when set, else the default."""
    sources = str(sources_file) if sources_file else from_env("RAG_SOURCES", DEFAULT_SOURCES_FILE)
    home = str(index_dir) if index_dir else from_env("RAG_INDEX_DIR", DEFAULT_INDEX_DIR)
    registry = RegistryConfig.from_sources(config)
    spatial = config.section("spatial", "spatial_config") or {}
    databases = sorted({s["postgis"]["dsn_env"] for s in spatial.get("sources", []) if "postgis" in s})
    return {
        "git_sources": GitSourcesResource(sources_file=sources),
        "index_store": IndexStoreResource(index_dir=home),
        "embedder": EmbedderResource(encoder=from_env("LIVEMEM_ENCODER", DEFAULT_ENCODER)),
        "registry_source": RegistrySourceResource(
            sources_file=sources, dsn=from_env(registry.dsn_env) if registry and registry.kind == "postgres" else ""
        ),
        "spatial_databases": SpatialDatabasesResource(
            dsns={name: from_env(name) for name in databases if from_env(name)}
        ),
        "trace_store": TraceStoreResource(directory=from_env("RAG_TRACE_DIR"), dsn=from_env("RAG_TRACE_DSN")),
    }


defs = build_definitions()
