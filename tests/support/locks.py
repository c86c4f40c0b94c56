"""Locks held from outside, as a stuck writer, a migration or a slow disk would hold them: for tests showing that
a request answers (or fails clearly) instead of waiting for good."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as Timeout
from contextlib import AbstractContextManager, ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


@contextmanager
def trace_file_locked(traces) -> Iterator[Path]:
    """Hold the exclusive lock on today's file of ``traces`` (a ``TraceWriter``: usage traces, audit records) from
    another open file: anything that writes to it now waits until the block ends."""
    traces.directory.mkdir(parents=True, exist_ok=True)
    path = traces.path_for(datetime.now(UTC).strftime("%Y-%m-%d"))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield path
    finally:
        os.close(fd)  # releases the lock


@contextmanager
def locks_held(*holds: AbstractContextManager[Any]) -> Iterator[tuple[Callable[[Callable[[], Any]], Any], list[Any]]]:
    """Hold every one of ``holds`` and give ``answer(call)``, which runs ``call()`` on another thread and returns
    its result, failing (instead of hanging the test) when it waits for a lock; and what each hold yielded."""
    # the pool shuts down last, after the locks are released, so a call that waits for one can finish
    with ThreadPoolExecutor(1) as pool, ExitStack() as stack:
        entered = [stack.enter_context(hold) for hold in holds]

        def answer(call: Callable[[], Any]) -> Any:
            try:
                return pool.submit(call).result(timeout=60)
            except Timeout:
                raise AssertionError("the call waited for a lock held elsewhere") from None

        yield answer, entered


@contextmanager
def postgres_table_locked(dsn: str, table: str) -> Iterator[None]:
    """Hold ``table`` in ACCESS EXCLUSIVE mode from another session (as a migration would)."""
    import psycopg

    holder = psycopg.connect(dsn, connect_timeout=3)  # in a transaction until the rollback
    try:
        holder.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        yield
    finally:
        holder.rollback()  # releases the lock
        holder.close()


@contextmanager
def sqlite_locked(path: Path) -> Iterator[None]:
    """Hold the SQLite database at ``path`` in an exclusive transaction from another connection."""
    import sqlite3

    holder = sqlite3.connect(path)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        yield
    finally:
        holder.rollback()
        holder.close()
