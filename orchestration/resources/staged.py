"""The staged version a run produced, handed to its checks and its publish step through that run's own event log.

Dagster's default IO manager keeps an asset's value in one file per asset key, shared by every run: with two runs
at once, one run's publish step could load (and publish) the other run's staged version. This IO manager stores
nothing in files: the value goes into the staging asset's materialization metadata (``staged``), and an input
is loaded from the materialization of the same asset *in the same run* (and partition). A run that did not stage
(say, one that materializes only the publish asset) fails with a message saying so; it never borrows another
run's version.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from dagster import (
    ConfigurableIOManager,
    DagsterEventType,
    EventLogRecord,
    Failure,
    InputContext,
    MetadataValue,
    OutputContext,
)

STAGED = "staged"  # the metadata entry holding the value


def staged_materialization(
    instance: Any, run_id: str, asset_key: Any, partition: str | None = None
) -> EventLogRecord | None:
    """The latest materialization of ``asset_key`` (and ``partition``) in run ``run_id``, None if there is none."""
    records = instance.get_records_for_run(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION).records
    found = [r for r in records if r.asset_key == asset_key and (partition is None or r.partition_key == partition)]
    return found[-1] if found else None


class StagedVersionIOManager(ConfigurableIOManager):
    """Run-scoped values of the staging assets ({version_id, base_version, reason}), kept in the event log."""

    def handle_output(self, context: OutputContext, obj: dict[str, Any]) -> None:
        context.add_output_metadata({STAGED: MetadataValue.json({**obj, "run_id": context.run_id})})

    def load_input(self, context: InputContext) -> dict[str, Any]:
        step = context.step_context
        partition = step.partition_key if step.has_partition_key else None
        record = staged_materialization(context.instance, step.run_id, context.asset_key, partition)
        name = context.asset_key.to_user_string()
        # a materialization's record always carries its materialization
        materialization = record.asset_materialization if record is not None else None
        if materialization is None or STAGED not in materialization.metadata:
            raise Failure(
                description=(
                    f"{name} was not materialized in this run ({step.run_id}"
                    f"{f', partition {partition}' if partition else ''}): a check or publish step only ever uses "
                    f"the version staged by {name} in its own run. Materialize {name} together with it "
                    "(e.g. `livemem materialize --job build_index`)."
                )
            )
        value = dict(cast("Mapping[str, Any]", materialization.metadata[STAGED].value))  # handle_output's JSON
        return {**value, "asset_key": name, "partition": partition}
