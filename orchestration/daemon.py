"""The Dagster daemon on the main path: its command line (``livemem up``, ``make run``) and whether it is alive
(``livemem status``).

The daemon is what runs the schedules (``nightly_attention_rollup``, ``daily_personal_memory``; see
``orchestration.schedules``), the run queue and run monitoring. ``make ui`` runs one inside ``dagster dev``;
``livemem up`` runs ``dagster-daemon run -m orchestration.definitions`` (the code location ``make ui`` loads) on
the instance in ``$DAGSTER_HOME`` beside the serving app.

Alive is read the way Dagster reads it (``dagster-daemon liveness-check``): every daemon the instance requires wrote
a heartbeat to the instance's storage within the heartbeat interval (30 s) plus a tolerance. Dagster's default
tolerance is 1800 s, which calls a daemon stopped 25 minutes ago alive; here it is ``DEFAULT_TOLERANCE_S`` unless
``DAGSTER_DAEMON_HEARTBEAT_TOLERANCE`` (Dagster's own variable) or ``livemem status --heartbeat-tolerance`` says.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_TOLERANCE_S = 90.0
MODULE = "orchestration.definitions"


def daemon_argv(python: str | None = None, workspace: list[str] | None = None) -> list[str]:
    """``dagster-daemon run`` on the code location ``make ui`` loads (``workspace``: other workspace options, e.g.
    ``["--empty-workspace"]``), from this environment's ``bin``."""
    exe = Path(python or sys.executable)
    daemon = exe.with_name("dagster-daemon")
    head = [str(daemon)] if daemon.exists() else [str(exe), "-m", "dagster._daemon"]
    return [*head, "run", *(["-m", MODULE] if workspace is None else workspace)]


def tolerance_from_env() -> float:
    value = os.environ.get("DAGSTER_DAEMON_HEARTBEAT_TOLERANCE", "").strip()
    return float(value) if value else DEFAULT_TOLERANCE_S


@dataclass(frozen=True)
class DaemonHealth:
    """Whether the daemon is alive, each required daemon's last heartbeat age (None: never), and why not."""

    alive: bool
    ages_s: dict[str, float | None]
    tolerance_s: float
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"alive": self.alive, "heartbeat_age_s": self.ages_s, "tolerance_s": self.tolerance_s,
                "reason": self.reason}  # fmt: skip

    def line(self) -> str:
        if self.alive:
            oldest = max((a for a in self.ages_s.values() if a is not None), default=0.0)
            return f"daemon: alive ({len(self.ages_s)} daemons, last heartbeats at most {oldest:.0f} s old)"
        return f"daemon: NOT alive: {self.reason}"


def daemon_health(instance: Any, tolerance_s: float | None = None, now: float | None = None) -> DaemonHealth:
    """The daemon's health from the heartbeats in ``instance`` (Dagster's ``get_daemon_statuses``, errors in a
    heartbeat ignored as ``liveness-check`` does); ``now``: a time.time() for tests."""
    from dagster._daemon.controller import DEFAULT_HEARTBEAT_INTERVAL_SECONDS, get_daemon_statuses

    tolerance = tolerance_from_env() if tolerance_s is None else tolerance_s
    now = time.time() if now is None else now
    required = list(instance.get_required_daemon_types())
    if not required:
        return DaemonHealth(False, {}, tolerance, "this instance runs no daemons (an ephemeral instance?)")
    statuses = get_daemon_statuses(
        instance, required, curr_time_seconds=now, ignore_errors=True,
        heartbeat_interval_seconds=DEFAULT_HEARTBEAT_INTERVAL_SECONDS, heartbeat_tolerance_seconds=tolerance,
    )  # fmt: skip
    ages = {
        kind: None if s.last_heartbeat is None else round(now - s.last_heartbeat.timestamp, 1)
        for kind, s in statuses.items()
    }
    dead = sorted(kind for kind, s in statuses.items() if not s.healthy)
    if not dead:
        return DaemonHealth(True, ages, tolerance, "")
    if all(ages[k] is None for k in dead):
        why = "no heartbeat ever written: no `dagster-daemon run` (or `make run`, `make ui`) on this DAGSTER_HOME"
    else:
        limit = DEFAULT_HEARTBEAT_INTERVAL_SECONDS + tolerance
        stale = ", ".join(f"{k} {ages[k]:.0f} s ago" if ages[k] is not None else f"{k} never" for k in dead)
        why = f"last heartbeats older than {limit:.0f} s ({stale}): the daemon stopped or hangs"
    return DaemonHealth(False, ages, tolerance, why)
