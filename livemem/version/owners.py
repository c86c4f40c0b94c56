"""Who is writing: a process (host, pid, start time) and, under Dagster, its run; and whether it is still alive.

A staged index version and a Dagster run both record their owner, so that a later writer can tell the remains of
a crashed (``kill -9``) writer, which it may reclaim, from the work of a writer that is still running, which it
must leave alone. A pid alone is not enough: pids are reused, so the process start time is recorded beside it.
Only processes of this host can be examined; an owner on another host is alive until someone who can see it
(Dagster's run monitoring, an operator) says otherwise.
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass
from typing import Any


def process_start_time(pid: int) -> str | None:
    """The start time of a process of this host (clock ticks since boot, from ``/proc``), None if unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            stat = fh.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: fields after it are split from its last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def process_alive(pid: int, started: str | None = None) -> bool:
    """Whether process ``pid`` of this host runs, and is the one that started at ``started`` (when known)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, owned by another user
    if started is None:
        return True
    now = process_start_time(pid)
    return now is None or now == started


@dataclass(frozen=True)
class Owner:
    """A writing process, and the Dagster run it executes (if any)."""

    host: str
    pid: int
    started: str | None
    run_id: str | None = None

    @classmethod
    def this_process(cls, run_id: str | None = None) -> Owner:
        pid = os.getpid()
        return cls(socket.gethostname(), pid, process_start_time(pid), run_id)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Owner:
        return cls(str(data["host"]), int(data["pid"]), data.get("started"), data.get("run_id"))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def is_local(self) -> bool:
        return self.host == socket.gethostname()

    def alive(self) -> bool | None:
        """True or False for a process of this host; None (unknown) for one of another host."""
        return process_alive(self.pid, self.started) if self.is_local() else None

    def describe(self) -> str:
        run = f"run {self.run_id}, " if self.run_id else ""
        return f"{run}pid {self.pid} on {self.host}"
