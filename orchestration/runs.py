"""Runs launched by ``livemem materialize``: who runs them, what a killed one leaves behind, and waiting for the
``index_writer`` pool.

Dagster keeps a run STARTED, and the pool slots it claimed held, until the run's own process says otherwise. A run
killed with ``kill -9`` says nothing: its slot of ``index_writer`` (limit 1) stays claimed and every later run
waits for it for ever (and Dagster 1.13 waits for a slot in a busy loop that ignores SIGTERM). So every run
``livemem materialize`` launches carries its host, pid and process start time as tags, and before (and while) a
run waits for the pool, runs of this host whose process is gone are reported failed and their slots freed. Runs of
other hosts are left to Dagster's run monitoring (``deploy/*.yaml``) or an operator; slots still held by runs that
have ended, whoever launched them, are freed too.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from dagster import DagsterInstance, DagsterRun, DagsterRunStatus, RunsFilter

from livemem.errors import LivingMemoryError
from livemem.version.owners import Owner

HOST_TAG = "livemem/host"
PID_TAG = "livemem/pid"
STARTED_TAG = "livemem/pid_started"
ACTIVE = [DagsterRunStatus.STARTING, DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]

Log = Callable[[str], None]


def run_tags(owner: Owner) -> dict[str, str]:
    """Tags naming the process that executes a run (read back by ``run_owner``)."""
    tags = {HOST_TAG: owner.host, PID_TAG: str(owner.pid)}
    if owner.started:
        tags[STARTED_TAG] = owner.started
    return tags


def run_owner(run: DagsterRun) -> Owner | None:
    """The process executing ``run``, when it was launched with ``run_tags``."""
    if HOST_TAG not in run.tags or not run.tags.get(PID_TAG, "").isdigit():
        return None
    return Owner(run.tags[HOST_TAG], int(run.tags[PID_TAG]), run.tags.get(STARTED_TAG), run.run_id)


def reap_dead_runs(instance: DagsterInstance, log: Log) -> list[str]:
    """Report failed the active runs of this host whose process is gone, and free every pool slot held by a run
    that is no longer active; returns the ids of the runs reported failed."""
    reaped = []
    runs = instance.get_runs(filters=RunsFilter(statuses=ACTIVE, tags={HOST_TAG: socket.gethostname()}))
    for run in runs:
        owner = run_owner(run)
        if owner is None or owner.alive() is not False:
            continue
        message = (
            f"the process of run {run.run_id} ({owner.describe()}) is gone (killed?): marked failed and its "
            "concurrency slots freed by livemem materialize"
        )
        instance.report_run_failed(run, message=message)
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        log(message)
        reaped.append(run.run_id)
    storage = instance.event_log_storage
    if storage.supports_global_concurrency_limits:
        for pool in storage.get_concurrency_keys():
            holders = {slot.run_id for slot in storage.get_concurrency_info(pool).claimed_slots}
            for run_id in sorted(holders):
                holder = instance.get_run_by_id(run_id)
                if holder is None or holder.is_finished:
                    storage.free_concurrency_slots_for_run(run_id)
                    state = "was deleted" if holder is None else f"ended ({holder.status.value})"
                    log(f"freed the {pool} slot still held by run {run_id}, which {state}")
    return reaped


@dataclass(frozen=True)
class Holder:
    """A run holding a slot of a pool."""

    run_id: str
    step_key: str
    job_name: str
    owner: Owner | None

    def describe(self) -> str:
        where = f", pid {self.owner.pid} on {self.owner.host}" if self.owner else ""
        return f"run {self.run_id} (job {self.job_name}, step {self.step_key}{where})"


def pool_holders(instance: DagsterInstance, pool: str) -> list[Holder]:
    holders = []
    for slot in instance.event_log_storage.get_concurrency_info(pool).claimed_slots:
        run = instance.get_run_by_id(slot.run_id)
        job = run.job_name if run else "?"
        holders.append(Holder(slot.run_id, slot.step_key, job, run_owner(run) if run else None))
    return holders


def busy_pools(instance: DagsterInstance, pools: Iterable[str], run_id: str | None = None) -> dict[str, list[Holder]]:
    """Pools without a free slot (for ``run_id``: in which that run has a step waiting), with their holders."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return {}
    busy = {}
    for pool in pools:
        info = storage.get_concurrency_info(pool)
        if info.limit is None or len(info.claimed_slots) < info.limit:
            continue
        if run_id is not None and not any(
            p.run_id == run_id and p.assigned_timestamp is None for p in info.pending_steps
        ):
            continue
        busy[pool] = pool_holders(instance, pool)
    return busy


class PoolWait:
    """Waiting for pool slots: reaps dead runs on every look, says once who holds the slot, and gives up after
    ``timeout_s`` seconds of waiting (0: never) with an error naming the holder."""

    def __init__(self, instance: DagsterInstance, pools: Iterable[str], timeout_s: float, log: Log) -> None:
        self.instance, self.pools, self.timeout_s, self.log = instance, sorted(set(pools)), timeout_s, log
        self.since: float | None = None
        self.announced = ""

    def blocked(self, run_id: str | None = None) -> bool:
        """Whether a slot is still missing now (for ``run_id``: whether that run waits for one)."""
        reap_dead_runs(self.instance, self.log)
        busy = busy_pools(self.instance, self.pools, run_id)
        if not busy:
            self.since = None
            return False
        now = time.monotonic()
        self.since = self.since or now
        holders = "; ".join(f"{pool}: {', '.join(h.describe() for h in hs) or '?'}" for pool, hs in busy.items())
        if holders != self.announced:
            self.log(f"waiting for a slot of {holders} (Ctrl-C stops waiting)")
            self.announced = holders
        if self.timeout_s and now - self.since > self.timeout_s:
            raise LivingMemoryError(
                f"gave up after {self.timeout_s:.0f} s waiting for a slot of {holders}. If that run is not "
                "running any more, mark it failed (Dagster UI: Terminate) and materialize again."
            )
        return True

    def until_free(self, interval_s: float = 1.0) -> None:
        """Sleep (interruptibly) until every pool has a free slot."""
        while self.blocked():
            time.sleep(interval_s)
