"""The versions a process holds open: the one ``CURRENT`` names, followed between requests, and older ones.

``IndexReader`` serves ``CURRENT``: ``snapshot()`` checks it (at most every ``refresh_interval_s``) and loads a
newly published version (``livemem.engine.snapshot.load_snapshot``) while other requests keep using the one they
hold; a version whose files are damaged is reported and the last good one keeps serving. ``OpenVersions`` keeps a
few older versions that requests name (``version`` / ``as_of``, docs/versions.md) loaded, least recently used first
out. Both load every version under the home's engine config (``IndexHome.engine``).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from livemem.engine.snapshot import SEGMENTS, IndexUnavailable, Snapshot, load_snapshot
from livemem.settings import EngineConfig
from livemem.version import parts_dir
from livemem.version.store import IndexHome

log = logging.getLogger(__name__)


def _derive_headings(snap: Snapshot) -> None:
    """Build ``snap``'s heading field (``Snapshot.headings``) now, best effort (a background thread after a load)."""
    if snap.damaged_segments():  # a copy changed under it: the next request loads the version again
        return
    try:
        snap.headings()
    except Exception as exc:  # best effort: a sparse query builds it again, and reports what is wrong
        log.warning("index version %s: the heading field could not be derived: %r", snap.version_id, exc)


class IndexReader:
    """The version ``CURRENT`` names, loaded once and swapped for a newer one between requests.

    ``snapshot()`` is cheap (a read of the small ``CURRENT`` file at most every ``refresh_interval_s``). When
    ``CURRENT`` has moved, one caller loads the new version while the others keep answering from the old one.
    Every version is loaded under the home's engine config (``IndexHome.engine``: ``engine``).
    """

    def __init__(self, home: IndexHome, refresh_interval_s: float = 0.0, retry_failed_s: float = 5.0) -> None:
        self.home = home
        self.refresh_interval_s = refresh_interval_s
        self.retry_failed_s = retry_failed_s
        self._snapshot: Snapshot | None = None
        self._checked_at = 0.0
        self._named: str | None = None
        self._failure: tuple[str, float, IndexUnavailable] | None = None
        self._load_lock = threading.Lock()
        self.swaps = 0

    @property
    def engine(self) -> EngineConfig:
        """The engine config the versions are loaded under (the home's)."""
        return self.home.engine

    @property
    def loaded(self) -> Snapshot | None:
        """The version loaded last (None before the first request), without checking ``CURRENT``."""
        return self._snapshot

    def problem(self) -> IndexUnavailable | None:
        """Why the version ``CURRENT`` names is not the one being served (it is damaged or unreadable), or None.

        Requests are then answered from the last good version; ``/healthz`` reports the problem as a 503."""
        failure = self._failure
        if (
            failure
            and failure[0] == self._named
            and (self._snapshot is None or self._snapshot.version_id != failure[0])
        ):
            return failure[2]
        return None

    def snapshot(self) -> Snapshot:
        """The snapshot to answer one request from; raises IndexUnavailable (nothing published, unreadable)."""
        now = time.monotonic()
        if self._snapshot is None or now - self._checked_at >= self.refresh_interval_s:
            self._named = self.home.current()
            self._checked_at = now
        named = self._named
        if named is None:
            raise IndexUnavailable("no index published yet: run `make materialize`")
        current = self._snapshot
        if current is not None and current.damaged_segments():
            current = self._drop_damaged(current)
        if current is not None and current.version_id == named:
            return current
        failure = self._failure
        if failure and failure[0] == named and now - failure[1] < self.retry_failed_s:
            if current is not None:
                return current  # the named version is damaged: the last good one keeps serving
            raise failure[2]
        # Another thread is loading: answer from the version already loaded rather than wait.
        if not self._load_lock.acquire(blocking=current is None):
            return current  # type: ignore[return-value]
        try:
            if self._snapshot is not None and self._snapshot.version_id == named:
                return self._snapshot
            try:
                fresh = load_snapshot(self.home, named)
            except IndexUnavailable as exc:
                self._failure = (named, time.monotonic(), exc)
                if current is not None:
                    log.error("%s; still serving version %s", exc, current.version_id)
                    return current
                log.error("%s", exc)
                raise
            self._failure = None
            self._snapshot = fresh
            # the heading field's postings (mode: sparse) are derived now, in the background, not on a first query
            threading.Thread(target=_derive_headings, args=(fresh,), name="heading-field", daemon=True).start()
            if current is not None:
                self.swaps += 1
                log.info("now serving index version %s (was %s)", named, current.version_id)
            return fresh
        finally:
            self._load_lock.release()

    def _drop_damaged(self, snap: Snapshot) -> Snapshot | None:
        """Stop serving ``snap``, some of whose serving copies changed under their mappings (truncated on disk):
        its damaged segments are forgotten and their copies removed, so the version is loaded again (from its
        verified files, into new copies) before this request reads anything. Returns what to serve meanwhile:
        nothing (the caller loads the version again, or answers 503 when its files are damaged too)."""
        with self._load_lock:
            if self._snapshot is not snap:
                return self._snapshot  # another thread already replaced it
            damaged = snap.damaged_segments()
            log.error(
                "index version %s: the serving copies of %s changed on disk under this worker; loading it again",
                snap.version_id, ", ".join(s.id for s in damaged),
            )  # fmt: skip
            SEGMENTS.discard(parts_dir(snap.path), damaged, snap.engine.serving_cache)
            self._snapshot = None
            self._failure = None
        return None


OPEN_VERSIONS = 2  # non-current versions a serving process keeps loaded (least recently used first out); the
# serving app takes it from ``ServingSettings.open_versions`` (``RAG_OPEN_VERSIONS``)


class OpenVersions:
    """A bounded LRU of loaded non-current versions, for requests that name one (``version`` / ``as_of``).

    Each is an ordinary ``Snapshot`` (``livemem.engine.snapshot.load_snapshot``): its segments come from the process'
    segment cache and the machine's serving copies, so the segments it shares with ``CURRENT`` (all but what
    changed since) cost nothing more; its own cost is the per-row id list and map, filter columns and attention
    (``docs/versions.md`` measures it). Loading is serialised: two requests for the same version load it once.

    ``size`` 0 keeps none open: each call loads the version and the caller's reference is the only one (it is
    freed when the request is done), for a process whose memory must stay that of ``CURRENT`` alone."""

    def __init__(self, home: IndexHome, size: int = OPEN_VERSIONS) -> None:
        from cachetools import LRUCache

        if size < 0:
            raise ValueError(f"open versions: {size} is not 0 or more")
        self.home = home
        self.size = size
        self._open: LRUCache = LRUCache(maxsize=max(1, size))
        self._lock = threading.Lock()
        self.loads = 0

    def get(self, version_id: str) -> Any:
        """The loaded snapshot of published ``version_id`` (loaded now if it is not open); raises IndexUnavailable
        when its files cannot be read."""
        with self._lock:
            snap = self._open.get(version_id)
            if snap is not None and snap.damaged_segments():
                del self._open[version_id]  # a serving copy changed under it: load it again
                snap = None
            if snap is None:
                snap = load_snapshot(self.home, version_id)
                self.loads += 1
                if self.size:
                    self._open[version_id] = snap
            return snap

    def loaded(self) -> list[str]:
        with self._lock:
            return list(self._open.keys())
