"""File tasks for the build's worker processes, and a worker function tests hand them: importable by module name, as
the workers (forkserver) unpickle functions by name, also from a build run with ``python -c``."""

from __future__ import annotations

import os
import time
from pathlib import Path

from livemem.ingest import read as read_module
from livemem.sources.gitsource import FileHistory, TreeEntry


def task(path: str, blob: str = "0" * 40) -> read_module.FileTask:
    when = "2026-01-01T00:00:00+00:00"
    return read_module.FileTask(path, TreeEntry(path, blob, 1), FileHistory("c" * 40, when, "c" * 40, when), None)


def report_and_wait(job, batch):
    """A worker that writes its process id into its batch's first path, then waits (to be killed)."""
    Path(batch[0].path).write_text(str(os.getpid()), encoding="utf-8")
    time.sleep(120)
