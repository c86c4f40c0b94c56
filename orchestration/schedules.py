"""Which schedules run by themselves.

Wherever the Dagster daemon runs (``make ui``, ``dagster-daemon run``) a schedule whose ``default_status`` is
RUNNING ticks without anyone turning it on:

- ``nightly_attention_rollup`` runs: without it attention never moves (docs/attention.md);
- ``daily_personal_memory`` runs: without it memory a user deleted stays on disk (docs/personal-memory.md);
- ``weekly_verify_index`` stays stopped: it rebuilds every published commit from scratch, which on a big index
  embeds for an hour or more, so an operator turns it on where that is affordable.

``LIVEMEM_SCHEDULES_OFF`` (schedule names, comma-separated, or ``all``) keeps any of them stopped. A toggle in the
Dagster UI is stored in the instance and wins over the default either way.
"""

from __future__ import annotations

from collections.abc import Iterable

from dagster import DefaultScheduleStatus

from livemem.errors import ConfigError
from livemem.settings import ScheduleSettings

RUNNING_BY_DEFAULT = ("nightly_attention_rollup", "daily_personal_memory")
STOPPED_BY_DEFAULT = ("weekly_verify_index",)
ALL = "all"


class ScheduleStatus:
    """The default status of each schedule, from ``LIVEMEM_SCHEDULES_OFF`` (read once, when definitions load)."""

    def __init__(self, off: Iterable[str] | None = None) -> None:
        self.off = frozenset(ScheduleSettings.from_env().off if off is None else off)
        unknown = sorted(self.off - {*RUNNING_BY_DEFAULT, *STOPPED_BY_DEFAULT, ALL})
        if unknown:
            known = ", ".join([*RUNNING_BY_DEFAULT, *STOPPED_BY_DEFAULT, ALL])
            raise ConfigError(f"LIVEMEM_SCHEDULES_OFF: no schedule named {', '.join(unknown)} (known: {known})")

    def __call__(self, name: str) -> DefaultScheduleStatus:
        running = name in RUNNING_BY_DEFAULT and name not in self.off and ALL not in self.off
        return DefaultScheduleStatus.RUNNING if running else DefaultScheduleStatus.STOPPED
