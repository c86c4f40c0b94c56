"""The janitor of an index home: retention and garbage collection.

It decides which published versions a retention policy keeps (``kept_versions``, like restic's ``--keep-last`` /
``--keep-daily`` / ``--keep-weekly``) and removes the others, clears what no live writer owns from ``staging/``
(the remains of a crashed, killed or disk-full writer), and collects what no kept or staged version names any more:
segments (``parts/``) and their serving copies (``livemem.version.segments.gc_parts``), and collections on a Chroma
server (``livemem.version.vectors.gc_server_collections``). It reads the home through its catalog
(``livemem.version.catalog``); every removal runs with the home's write lock held (``livemem.version.publisher``).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from livemem.dates import utc_now
from livemem.errors import LivingMemoryError
from livemem.settings import EngineConfig
from livemem.sources.config import Retention
from livemem.version import PARTS
from livemem.version.catalog import MANIFEST, OWNER_SUFFIX, VersionCatalog, id_time
from livemem.version.vectors import gc_server_collections

STALE_STAGING_S = 24 * 3600  # a staged version this old is reclaimable whoever owns it (e.g. a lost host)


class HomeJanitor:
    """Removes from one index home what retention lets go and what no version names any more."""

    def __init__(self, catalog: VersionCatalog, engine: EngineConfig) -> None:
        self.catalog = catalog
        # where this process's serving copies live (``engine.serving_cache``): removed with their segments
        self.engine = engine
        # How to ask whether another owner's run has finished (True / False; None when unknown, then its process
        # decides).
        self.run_finished: Callable[[str], bool | None] | None = None
        # The Chroma server (host, port) the entry point's ``ChromaSettings`` names (``CHROMA_HOST``): pruning
        # deletes the server collections no kept version references. None: no server, nothing to delete there.
        self.chroma_server: tuple[str, int] | None = None

    def prune(self, retention: int | Retention | dict[str, int], now: datetime | None = None) -> list[str]:
        """Keep the versions ``retention`` names (``kept_versions``) and the current one; remove the others and the
        segments no kept or staged version names."""
        catalog = self.catalog
        current = catalog.current()
        published = catalog.published_versions()
        times = {}
        for version in published:
            try:
                times[version] = catalog.published_at(version)
            except LivingMemoryError:  # an unreadable manifest: its id's time
                times[version] = id_time(version)
        keep = kept_versions(Retention.of(retention), times, now or utc_now()) | {current}
        removed = [v for v in published if v not in keep]
        for version in removed:
            shutil.rmtree(catalog.version_dir(version), ignore_errors=True)
        self.gc_vectors()
        return removed

    def gc_vectors(self) -> None:
        """Delete the Chroma server collections and the segments (with their serving copies) no version names."""
        gc_server_collections(self.catalog.root, self.chroma_server)
        self._gc_parts()

    def _gc_parts(self) -> None:
        """Remove the segments (and half-written ones) no published or complete staged version names."""
        from livemem.version.segments import gc_parts

        gc_parts(self.catalog.root, self.catalog.referenced_segments(), self.engine.serving_cache)

    def clear_staging(self, keep_latest: int = 0) -> list[str]:
        """Remove what no live writer owns from ``staging/`` (and the segments only it held); call with the write
        lock held. Every writer calls it before it stages (a build, ``derive_version``) and every publish after
        it switches (retention), so what a killed or disk-full writer left is gone by the next one.

        Every staging step holds the lock, so an incomplete directory (no manifest) now is the remains of a
        crashed writer: removed. A complete one awaits its checks and publish step, which run without the lock:
        it is kept while its owner is alive (``owner_alive``), since taking it would make that run fail. One whose
        owner is gone (a check failed, or the writer was killed or ran out of disk before publishing) stays for
        inspection until the next writer comes, then goes (``keep_latest``: keep that many of the newest of them).
        A segment directory a killed writer left half-written (``parts/.tmp-*``) goes too.
        """
        catalog = self.catalog
        if not catalog.staging.is_dir():
            return []
        staged = sorted(p.name for p in catalog.staging.iterdir() if p.is_dir())
        complete = [v for v in staged if (catalog.staged_dir(v) / MANIFEST).is_file()]
        abandoned = [v for v in complete if not self.owner_alive(v)]
        doomed = [v for v in staged if v not in complete] + abandoned[: max(0, len(abandoned) - keep_latest)]
        for version in doomed:
            shutil.rmtree(catalog.staged_dir(version), ignore_errors=True)
            catalog.owner_file(version).unlink(missing_ok=True)
        for record in catalog.staging.glob("*" + OWNER_SUFFIX):  # ids whose writer died before making the directory
            version = record.name.removesuffix(OWNER_SUFFIX)
            if version not in staged and not self.owner_alive(version):
                record.unlink(missing_ok=True)
        parts = catalog.root / PARTS
        if doomed:
            self.gc_vectors()
        elif parts.is_dir() and any(p.name.startswith(".tmp-") for p in parts.iterdir()):
            self._gc_parts()  # a segment half-written by a killed writer
        return doomed

    def owner_alive(self, version_id: str) -> bool:
        """Whether the writer that staged ``version_id`` may still check and publish it: its Dagster run has not
        finished (when the instance knows the run), else its process still runs (on another host: assumed), and
        the version is less than ``STALE_STAGING_S`` old. Unrecorded owners are gone."""
        owner = self.catalog.staging_owner(version_id)
        if owner is None:
            return False
        try:
            if time.time() - self.catalog.owner_file(version_id).stat().st_mtime > STALE_STAGING_S:
                return False
        except OSError:
            return False
        if owner.run_id and self.run_finished is not None:
            finished = self.run_finished(owner.run_id)
            if finished is not None:
                # the run, not the step process, owns it: with the multiprocess executor the staging step's
                # process has exited long before the publish step runs
                return not finished
        alive = owner.alive()
        return True if alive is None else alive


def kept_versions(policy: Retention, published_at: dict[str, datetime], now: datetime) -> set[str]:
    """The versions a retention policy keeps, of ``published_at`` (version → publish time): the ``keep_last``
    newest, and the newest published on each of the last ``daily_days`` UTC days (today included) and in each of the
    last ``weekly_weeks`` ISO weeks (this one included): the one that was current when that day or week ended,
    unless a rollback said otherwise. Like restic's ``--keep-last`` / ``--keep-daily`` / ``--keep-weekly``."""
    newest_first = sorted(published_at, key=lambda v: (published_at[v], v), reverse=True)
    keep = set(newest_first[: policy.keep_last])
    today = now.astimezone(UTC).date()
    first_day = today - timedelta(days=policy.daily_days - 1)
    this_week = today - timedelta(days=today.weekday())
    first_week = this_week - timedelta(weeks=policy.weekly_weeks - 1)
    days: set[Any] = set()
    weeks: set[Any] = set()
    for version in newest_first:
        day = published_at[version].astimezone(UTC).date()
        week = day - timedelta(days=day.weekday())
        if policy.daily_days and first_day <= day <= today and day not in days:
            days.add(day)
            keep.add(version)
        if policy.weekly_weeks and first_week <= week <= this_week and week not in weeks:
            weeks.add(week)
            keep.add(version)
    return keep
