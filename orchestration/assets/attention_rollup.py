"""Usage traces → daily signals → attention scores with decay, published as a new index version every night.

- ``attention_rollup`` (daily partitions in the configured timezone) reads every trace file of the day, writes
  ``signals/<day>.json`` and the attention state after the day, and stages a version whose ``attention`` table
  is the new state (vectors and everything else are shared with the current version, untouched). It depends on
  its own previous partition, so backfills run day after day in order.
- ``attention_valid`` (blocking) checks the staged attention, and ``answers_not_worse`` (blocking, the answer gate
  every publishing job runs: ``orchestration.assets.answer_gate``) asks the answer suite of it; ``attention_published``
  then switches CURRENT.
- ``nightly_attention_rollup`` runs yesterday's partition every night.

The formula is in ``livemem/usage/attention.py`` and ``docs/attention.md``.
"""

import warnings
from collections.abc import Callable
from datetime import date
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetDep,
    AssetExecutionContext,
    DailyPartitionsDefinition,
    DefaultScheduleStatus,
    Failure,
    MetadataValue,
    Output,
    PartitionsDefinition,
    PreviewWarning,
    TimeWindowPartitionMapping,
    asset_check,
    build_schedule_from_partitioned_job,
    define_asset_job,
)

from livemem.ingest import checks
from livemem.ingest.manifest import read_breath
from livemem.sources.config import SourcesConfig
from livemem.usage.attention import AttentionConfig, RollupResult, attention_config, rollup_day, settle_staged_state
from orchestration.assets.answer_gate import answer_gate_check
from orchestration.assets.publishing import check_result, publish_asset, staged_output, staging_asset
from orchestration.resources import EmbedderResource, GitSourcesResource, IndexStoreResource, TraceStoreResource

GROUP = "living_memory"


def partition_range(partitions: PartitionsDefinition) -> str:
    """The partitions that exist now, as an operator reads them: ``2026-01-01 … 2026-11-25``."""
    first, last = partitions.get_first_partition_key(), partitions.get_last_partition_key()
    return f"{first} … {last}" if first and last else "none yet"


def refuse_unknown_partition(partitions: PartitionsDefinition, key: str, timezone: str) -> None:
    """Fail before anything is read or written when ``key`` is not a partition (today's day, which has not ended,
    a future one, one before the start, or no date at all): `dagster job execute --tags dagster/partition` runs
    the steps with any key."""
    if partitions.has_partition_key(key):
        return
    raise Failure(
        description=(
            f"attention_rollup: no partition {key!r}: the days that can be rolled up are {partition_range(partitions)} "
            f"({timezone}); a day is rolled up once it has ended there. Nothing was read or written."
        )
    )


def rollup_metadata(result: RollupResult) -> dict[str, Any]:
    """What the UI shows of one day's rollup: counts, decay, attention stats, malformed trace lines."""
    meta: dict[str, Any] = {
        "status": result.reason,
        "day": result.day,
        "version_id": result.version_id or "",
        "base_version": result.base_version or "",
        "trace_events": result.events,
        "malformed_lines": result.malformed,
        "trace_files": result.files,
        "chunks_used": result.chunks_used,
        "decay_rate": result.decay_rate,
        "attention_stats": result.attention_stats,
        "timings_s": result.timings,
    }
    if result.malformed_examples:
        meta["malformed_examples"] = MetadataValue.md("\n".join(f"- `{e}`" for e in result.malformed_examples))
    return meta


def stage_rollup(
    context: AssetExecutionContext,
    partitions: PartitionsDefinition,
    timezone: str,
    git_sources: GitSourcesResource,
    index_store: IndexStoreResource,
    embedder: EmbedderResource,
    trace_store: TraceStoreResource,
) -> Output[dict[str, Any]]:
    """The body of ``attention_rollup``: roll up the partition's day and stage the new attention as a version."""
    refuse_unknown_partition(partitions, context.partition_key, timezone)
    sources = git_sources.load()
    day = date.fromisoformat(context.partition_key)
    home = index_store.home()
    # the questions chunks were confirmed useful for are embedded with the index's model (loaded lazily)
    result = rollup_day(
        home, day, attention_config(sources), read_breath(sources), embedder=embedder.embedder(),
        traces=trace_store.settings(),
    )  # fmt: skip
    context.log.info(result.reason)
    meta = rollup_metadata(result)
    return staged_output(context, home, result.version_id, result.base_version, result.reason, meta)


def check_attention_valid(attention_rollup: dict[str, Any], index_store: IndexStoreResource) -> AssetCheckResult:
    """The body of ``attention_valid``: the staged attention (nothing staged passes)."""
    version = attention_rollup["version_id"]
    if version is None:
        return AssetCheckResult(passed=True, description="nothing staged", metadata={"summary": "nothing staged"})
    return check_result(checks.check_attention(index_store.home().locate(version)))


def _rollup_asset(partitions: PartitionsDefinition, timezone: str) -> Any:
    """The ``attention_rollup`` staging asset: one day partition, after its previous day."""

    @staging_asset(
        name="attention_rollup",
        pool="index_writer",
        group_name=GROUP,
        partitions_def=partitions,
        kinds={"duckdb", "json"},
        code_version="attention-v2",
        deps=[
            "published_index",
            AssetDep("attention_rollup", partition_mapping=TimeWindowPartitionMapping(start_offset=-1, end_offset=-1)),
        ],
        description=(
            "One day of usage traces rolled up into signals and attention (confirmed usefulness adds, negative "
            "feedback takes back, mere retrieval adds nothing; decay for unjudged open chunks, none for sealed "
            "ones) and the questions chunks were confirmed for, staged as a new index version."
        ),
    )
    def attention_rollup(
        context: AssetExecutionContext,
        git_sources: GitSourcesResource,
        index_store: IndexStoreResource,
        embedder: EmbedderResource,
        trace_store: TraceStoreResource,
    ) -> Output[dict[str, Any]]:
        return stage_rollup(context, partitions, timezone, git_sources, index_store, embedder, trace_store)

    return attention_rollup


def _rollup_checks(attention_rollup: Any, partitions: PartitionsDefinition) -> list[Any]:
    """``attention_valid`` and the answer gate, both blocking and partitioned like the rollup."""
    with warnings.catch_warnings():  # partitioned checks are a Dagster preview feature; they are what we need
        warnings.simplefilter("ignore", PreviewWarning)
        attention_valid = asset_check(
            asset=attention_rollup,
            name="attention_valid",
            blocking=True,
            partitions_def=partitions,
            description="Every chunk has a finite attention >= 0 and every record stays valid per the chunk schema.",
        )(check_attention_valid)
        # attention reorders results: a nightly publish is held to the answer suite like every other one
        answers_gate = answer_gate_check(attention_rollup, "attention_rollup", partitions_def=partitions)
    return [attention_valid, answers_gate]


def _rollup_schedule(
    cfg: AttentionConfig, partitions: PartitionsDefinition, status: Callable[[str], DefaultScheduleStatus] | None
) -> tuple[Any, Any]:
    """``attention_rollup_job`` and its nightly schedule for yesterday's partition."""
    job = define_asset_job(
        "attention_rollup_job",
        selection=["attention_rollup", "attention_published"],
        partitions_def=partitions,
        description="Roll up one day of traces into attention and publish it.",
    )
    schedule = build_schedule_from_partitioned_job(
        job,
        name="nightly_attention_rollup",
        hour_of_day=cfg.schedule_hour,
        default_status=status("nightly_attention_rollup") if status else DefaultScheduleStatus.RUNNING,
        description=f"Every night at {cfg.schedule_hour:02d}:00 {cfg.timezone}: roll up yesterday's traces.",
    )
    return job, schedule


def build_attention_assets(
    config: SourcesConfig, status: Callable[[str], DefaultScheduleStatus] | None = None
) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
    """Assets, checks, jobs and schedules of the attention rollup (``status``: a schedule's default status by name,
    ``orchestration.schedules.ScheduleStatus``; default RUNNING)."""
    cfg = attention_config(config)
    partitions = DailyPartitionsDefinition(start_date=cfg.start_date, timezone=cfg.timezone)
    attention_rollup = _rollup_asset(partitions, cfg.timezone)
    attention_valid, answers_gate = _rollup_checks(attention_rollup, partitions)
    attention_published = publish_asset(
        name="attention_published",
        staging="attention_rollup",
        description="The rolled-up attention made current (atomic switch of CURRENT) once its check passed.",
        group_name=GROUP,
        checks=[attention_valid, answers_gate],
        row_count=lambda m: m["total_chunks"],
        partitions_def=partitions,
        after_publish=settle_staged_state,
    )
    job, schedule = _rollup_schedule(cfg, partitions, status)
    return [attention_rollup, attention_published], [attention_valid, answers_gate], [job], [schedule]
