"""The Dagster instance in ``$DAGSTER_HOME``, opened the one way every entry point opens it (``livemem materialize``,
the MCP ``reindex_status`` tool)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def open_instance(dagster_home: Path) -> Any:
    """The instance in ``$DAGSTER_HOME``, its storages created or migrated by one process at a time: two first
    runs started together on a fresh home would otherwise both run the SQLite schema migrations (alembic then
    finds two heads and one run fails)."""
    from dagster import DagsterInstance
    from filelock import FileLock

    with FileLock(str(dagster_home / ".livemem-instance.lock"), timeout=120):
        instance = DagsterInstance.get()
        instance.get_runs(limit=1)
        instance.event_log_storage.get_concurrency_keys()
        instance.all_instigator_state()
    return instance
