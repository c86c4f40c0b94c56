"""Personal memory consolidated every day: the log the API appended to → one immutable snapshot the API reads.

``personal_memory`` applies deletions (tombstones), drops what is past retention, merges duplicates, embeds the
cards and exchanges with the project's embedder (reusing the previous snapshot's vectors), writes the snapshot
(temp + rename, then ``CURRENT``), and only then purges the covered rows from the log and deletes older snapshots.
``personal_memory_readable`` checks what readers will load. The logic is ``livemem.personal.consolidate``;
docs/personal-memory.md.
"""

from collections.abc import Callable
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetExecutionContext,
    AssetSelection,
    Config,
    DefaultScheduleStatus,
    MaterializeResult,
    MetadataValue,
    ScheduleDefinition,
    asset,
    asset_check,
    define_asset_job,
)
from pydantic import Field

from livemem import personal
from livemem.settings import PersonalSettings
from orchestration.resources import EmbedderResource, IndexStoreResource, TraceStoreResource

GROUP = "personal_memory"


class PersonalMemoryConfig(Config):
    retention_days: int = Field(
        0, ge=0, description="days personal memory is kept; 0: $LIVEMEM_PERSONAL_RETENTION_DAYS, else 365"
    )


@asset(
    name="personal_memory",
    group_name=GROUP,
    kinds={"sqlite", "numpy"},
    code_version="personal-memory-v1",
    description=(
        "Each user's memory cards, remembered exchanges and feedback, consolidated from the append-only log the "
        "API writes: deletions applied, expired rows dropped, duplicates merged, texts embedded; one immutable "
        "snapshot per run, switched atomically."
    ),
)
def personal_memory(
    context: AssetExecutionContext,
    config: PersonalMemoryConfig,
    index_store: IndexStoreResource,
    embedder: EmbedderResource,
    trace_store: TraceStoreResource,
) -> MaterializeResult:
    settings = PersonalSettings.from_env()  # read once, passed down
    directory = settings.directory(index_store.home().root)
    days = config.retention_days or settings.retention_days
    dsn = trace_store.settings().dsn  # the log lives beside the traces: their Postgres table when they have one
    model = embedder.embedder()  # loaded only when something new has to be embedded
    result = personal.consolidate(directory, lambda texts: model.encode(texts), model.model_id, days, dsn=dsn)
    context.log.info(f"snapshot {result.snapshot_id}: {result.items} items of {result.users} users")
    purged = "\n".join(f"| {name} | {n} |" for name, n in result.purged.items())
    return MaterializeResult(
        metadata={
            "snapshot": result.snapshot_id,
            "through_log_id": result.through_id,
            "dagster/row_count": result.items,
            "users": result.users,
            "embedded": result.embedded,
            "vectors_reused": result.reused_vectors,
            "feedback_nudges": result.feedback,
            "retention_days": days,
            "purged_log_rows": MetadataValue.md(f"| purged | rows |\n|---|---|\n{purged}"),
            "timings_s": result.timings_s,
        }
    )


@asset_check(
    asset=personal_memory,
    name="personal_memory_readable",
    description="The current snapshot loads, has one finite unit vector per item, and every item names its user.",
)
def personal_memory_readable(index_store: IndexStoreResource) -> AssetCheckResult:
    directory = PersonalSettings.from_env().directory(index_store.home().root)
    snapshot_id = personal.current_snapshot_id(directory)
    if snapshot_id is None:
        return AssetCheckResult(passed=False, description="no CURRENT snapshot")
    snap = personal.load_memory_snapshot(directory, snapshot_id)
    problems: list[str] = []
    if len(snap.items) != len(snap.vectors):
        problems.append(f"{len(snap.items)} items but {len(snap.vectors)} vectors")
    elif len(snap.items):
        import numpy as np

        norms = np.linalg.norm(snap.vectors, axis=1)
        if not np.all(np.isfinite(snap.vectors)) or not np.allclose(norms, 1.0, atol=1e-3):
            problems.append("vectors that are not finite unit vectors")
    if any(not item.get("user") for item in snap.items):
        problems.append("items without a user")
    meta: dict[str, Any] = {"snapshot": snapshot_id, "items": len(snap.items)}
    return AssetCheckResult(passed=not problems, description="; ".join(problems) or "readable", metadata=meta)


def build_personal_memory_assets(
    status: Callable[[str], DefaultScheduleStatus] | None = None,
) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
    """Assets, checks, jobs and schedules of personal memory (``status``: a schedule's default status by name,
    ``orchestration.schedules.ScheduleStatus``; default RUNNING)."""
    job = define_asset_job(
        "personal_memory_job",
        selection=AssetSelection.assets(personal_memory),
        description="Consolidate personal memory: apply deletions and retention, embed, write the snapshot.",
    )
    schedule = ScheduleDefinition(
        name="daily_personal_memory",
        job=job,
        cron_schedule="30 3 * * *",
        execution_timezone="UTC",
        description="Every day at 03:30 UTC: consolidate personal memory (deletions become physical).",
        default_status=status("daily_personal_memory") if status else DefaultScheduleStatus.RUNNING,
    )
    return [personal_memory], [personal_memory_readable], [job], [schedule]
