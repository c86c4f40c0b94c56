"""The index home: immutable versions, staging, the atomic switch of ``CURRENT``, retention.

Layout (see ``rag_index/README.md``)::

    <home>/CURRENT                     id of the published version (written to a temp file, then renamed)
    <home>/versions/<id>/              published versions, never modified
        manifest.json                  what is in the version (schemas/manifest.schema.json), its segments
        tables.duckdb                  small: membership (which rows of which segments), views ``chunks`` and
                                       ``parents`` over them, attention, lineage, skipped_files, other steps' tables
        chroma/                        only with ``index.vector_store: chroma``: persistent Chroma
    <home>/parts/seg-<hash>/           immutable segments shared by versions (``livemem.version``): chunk and
                                       parent rows, vectors, BM25 postings; removed when no kept version names them
    <home>/staging/<id>/               a version being built or checked; moved to versions/ when published
    <home>/staging/<id>.owner.json     who staged it (Dagster run, host, pid): never reclaimed while alive
    <home>/cache/embeddings.sqlite     embedding cache (content hash + model id; livemem.model.embed_cache)
    <home>/publish_log.jsonl           every switch of CURRENT (publish and rollback)

A version is built in ``staging/``, checked there, then renamed into ``versions/`` and named in ``CURRENT``
(both renames are atomic on one file system). Readers only ever open what ``CURRENT`` names, so a crash at any
point leaves the previous version serving.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from filelock import FileLock

from livemem.dates import iso, utc_now
from livemem.errors import LivingMemoryError, PublishConflict
from livemem.settings import EngineConfig
from livemem.sources.config import Retention
from livemem.version import PARTS, parts_dir
from livemem.version.owners import Owner

MANIFEST = "manifest.json"
TABLES = "tables.duckdb"
CHROMA = "chroma"
OWNER_SUFFIX = ".owner.json"
STALE_STAGING_S = 24 * 3600  # a staged version this old is reclaimable whoever owns it (e.g. a lost host)
# Who may read the index home (versions, segments and caches hold internal text, so nothing there may be 0644):
# the home directory is 0750 (the service's user, and a group it chooses, e.g. a serving user's), so nothing under
# it is reachable by other users whatever their own modes; a version's files and directories lose every
# permission for others and write for the group when its manifest is written (``private_tree``: 0640 / 0750),
# segments are 0440 (``livemem.version.segments``), serving copies 0440 under a 0700 directory
# (``livemem.version.mapped``).
HOME_MODE = 0o750
NOT_SHARED = 0o027  # permission bits a version's files never keep: group write, everything for others


class IndexHome:
    """One index home directory (``RAG_INDEX_DIR``)."""

    # Who stages through this object (the Dagster resource sets its run; default: this process), and how to ask
    # whether another owner's run has finished (True / False; None when unknown, then its process decides).
    owner: Owner | None = None
    run_finished: Callable[[str], bool | None] | None = None
    # The Chroma server (host, port) the entry point's ``ChromaSettings`` names (``CHROMA_HOST``): pruning deletes
    # the server collections no kept version references. None: no server, nothing to delete there.
    chroma_server: tuple[str, int] | None = None

    def __init__(
        self,
        root: str | os.PathLike[str],
        cache_dir: str | os.PathLike[str] | None = None,
        engine: EngineConfig | None = None,
    ) -> None:
        self.root = Path(root).resolve()
        # How this process reads the home's versions (the entry point's ``EngineConfig``, ``EngineConfig.from_env()``;
        # None: the defaults): the dense scan's knobs and where serving copies live. ``load_snapshot``,
        # ``IndexReader`` and ``OpenVersions`` hand it to the snapshots they load; pruning removes the copies there.
        self.engine = engine if engine is not None else EngineConfig.defaults()
        self.versions = self.root / "versions"
        self.staging = self.root / "staging"
        # Another home's cache may be shared (``verify --rebuild`` rebuilds into a temporary home with the live
        # home's embeddings, holding the live home's write lock so no build writes the cache meanwhile).
        self.cache_dir = Path(cache_dir).resolve() if cache_dir else self.root / "cache"
        self.traces = self.root / "traces"
        self.current_file = self.root / "CURRENT"
        self.log_file = self.root / "publish_log.jsonl"

    def ensure(self) -> IndexHome:
        self._make_root()
        for d in (self.versions, self.staging, self.cache_dir, self.traces):
            d.mkdir(mode=HOME_MODE, parents=True, exist_ok=True)
        return self

    def _make_root(self) -> None:
        """Create the home directory, or narrow it, to ``HOME_MODE`` (a directory another user owns is left as it
        is: it is theirs to set)."""
        self.root.mkdir(mode=HOME_MODE, parents=True, exist_ok=True)
        try:
            status = self.root.stat()
            if status.st_uid == os.geteuid() and stat.S_IMODE(status.st_mode) & ~HOME_MODE:
                self.root.chmod(stat.S_IMODE(status.st_mode) & HOME_MODE)
        except OSError:  # a read-only mount: nothing this process writes there anyway
            pass

    def write_lock(self, timeout: float = 600) -> FileLock:
        """Held while staging or publishing: one writer per index home (DuckDB files have one writer)."""
        self._make_root()
        return FileLock(str(self.root / ".write.lock"), timeout=timeout)

    # --- reading -------------------------------------------------------------------------------------------
    def current(self) -> str | None:
        try:
            version = self.current_file.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        return version or None

    def version_dir(self, version_id: str) -> Path:
        return self.versions / version_id

    def staged_dir(self, version_id: str) -> Path:
        return self.staging / version_id

    def locate(self, version_id: str) -> Path:
        """The directory of a version, published or staged."""
        for d in (self.version_dir(version_id), self.staged_dir(version_id)):
            if d.is_dir():
                return d
        raise LivingMemoryError(f"index version {version_id!r} not found under {self.root}")

    def manifest(self, version_id: str) -> dict[str, Any]:
        path = self.locate(version_id) / MANIFEST
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise LivingMemoryError(f"manifest of version {version_id} is unreadable ({path}): {exc}") from exc

    def current_manifest(self) -> dict[str, Any] | None:
        version = self.current()
        return self.manifest(version) if version else None

    def published_versions(self) -> list[str]:
        """Published version ids, oldest first (ids sort by creation time)."""
        if not self.versions.is_dir():
            return []
        return sorted(p.name for p in self.versions.iterdir() if (p / MANIFEST).is_file())

    def publish_log(self) -> list[dict[str, str]]:
        """Every switch of ``CURRENT`` (``publish_log.jsonl``: at, action, version), oldest first; unreadable lines
        (a line cut by a crash) are skipped."""
        events = []
        try:
            lines = self.log_file.read_text(encoding="utf-8").splitlines()
        except OSError:
            return []
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and {"at", "action", "version"} <= event.keys():
                events.append(event)
        return events

    def published_at(self, version_id: str, manifest: dict[str, Any] | None = None) -> datetime:
        """When ``version_id`` was first published: ``published_at`` in its manifest (written by ``publish``), else
        its first publish in the log, else the time its id names (when it was staged; versions published before
        publish times were recorded)."""
        manifest = self.manifest(version_id) if manifest is None else manifest
        for value in (manifest.get("published_at"), self._first_published().get(version_id)):
            if value:
                try:
                    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).astimezone(UTC)
                except ValueError:
                    pass
        return id_time(version_id)

    def _first_published(self) -> dict[str, str]:
        first: dict[str, str] = {}
        for event in self.publish_log():
            if event["action"] == "publish":
                first.setdefault(event["version"], event["at"])
        return first

    # --- writing -------------------------------------------------------------------------------------------
    def new_version_id(self) -> str:
        """A new version id (ids sort by creation time), recorded as this writer's (``staging/<id>.owner.json``)
        before its directory exists, so that no other writer's ``clear_staging`` takes it while it is alive."""
        now = utc_now()
        version_id = now.strftime("%Y%m%dT%H%M%S") + f"{now.microsecond:06d}Z"
        self.staging.mkdir(parents=True, exist_ok=True)
        owner = self.owner or Owner.this_process()
        self.owner_file(version_id).write_text(json.dumps(owner.to_dict()), encoding="utf-8")
        return version_id

    def owner_file(self, version_id: str) -> Path:
        return self.staging / f"{version_id}{OWNER_SUFFIX}"

    def staging_owner(self, version_id: str) -> Owner | None:
        """Who staged ``version_id`` (None when not recorded or unreadable)."""
        try:
            return Owner.from_dict(json.loads(self.owner_file(version_id).read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def record_staged_by(self, version_id: str, run_id: str) -> None:
        """Write into a staged version's manifest which run staged it (``publish`` checks it). Only the run id:
        the manifest is served (``/manifest``), while host and pid stay in the owner record, removed at publish."""
        path = self.staged_dir(version_id) / MANIFEST
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise LivingMemoryError(f"staged version {version_id} has no readable manifest ({path}): {exc}") from exc
        manifest["staged_by"] = {"run_id": run_id}
        tmp = path.with_name(MANIFEST + ".tmp")
        tmp.write_text(json.dumps(manifest, indent=2, ensure_ascii=False), encoding="utf-8")
        tmp.chmod(0o640)
        os.replace(tmp, path)

    def publish(
        self,
        version_id: str,
        expected_base: str | None,
        retention: int | Retention | dict[str, int],
        run_id: str | None = None,
        now: datetime | None = None,
    ) -> list[str]:
        """Move a staged version into ``versions/`` and switch ``CURRENT`` to it; returns the pruned versions.
        Its manifest gains ``published_at`` (``now``); ``retention`` says which versions stay (``Retention``).

        Raises PublishConflict when another version was published after this one was staged from
        ``expected_base`` (publishing it would silently drop that version's changes). With ``run_id``, refuses a
        version whose manifest does not say that run staged it (``record_staged_by``).
        """
        with self.write_lock():
            current = self.current()
            if current != expected_base:
                raise PublishConflict(
                    f"version {version_id} was built on {expected_base or 'an empty index'}, but {current} "
                    "has been published since; materialize again to build on the newer version"
                )
            staged = self.staged_dir(version_id)
            if not (staged / MANIFEST).is_file():
                raise LivingMemoryError(f"staged version {version_id} is missing or incomplete ({staged})")
            if run_id is not None:
                staged_by = json.loads((staged / MANIFEST).read_text(encoding="utf-8")).get("staged_by") or {}
                if staged_by.get("run_id") != run_id:
                    raise LivingMemoryError(
                        f"version {version_id} was staged by {staged_by.get('run_id') or 'no recorded run'}, not by "
                        f"run {run_id}: a run publishes only the version it staged and checked itself"
                    )
            when = now or utc_now()
            self._stamp_published(staged, when)
            self.versions.mkdir(parents=True, exist_ok=True)
            os.replace(staged, self.version_dir(version_id))
            self.owner_file(version_id).unlink(missing_ok=True)
            self._switch(version_id, "publish", when)
            self.clear_staging()  # retention covers staging too: what no live writer owns goes with the old versions
            return self._prune(retention, now)

    @staticmethod
    def _stamp_published(staged: Path, when: datetime) -> None:
        """Record the publish time in the staged manifest (not one of its ``files``: nothing else changes)."""
        path = staged / MANIFEST
        manifest = json.loads(path.read_text(encoding="utf-8"))
        manifest["published_at"] = iso(when)
        tmp = path.with_name(MANIFEST + ".tmp")
        tmp.write_text(json.dumps(manifest, indent=2, ensure_ascii=False), encoding="utf-8")
        tmp.chmod(0o640)
        os.replace(tmp, path)

    def rollback(self, version_id: str) -> None:
        """Point ``CURRENT`` back at an older published version."""
        with self.write_lock():
            if not (self.version_dir(version_id) / MANIFEST).is_file():
                raise LivingMemoryError(f"no published version {version_id!r} under {self.versions}")
            self._switch(version_id, "rollback")

    def _switch(self, version_id: str, action: str, when: datetime | None = None) -> None:
        tmp = self.current_file.with_name(f".CURRENT.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(version_id + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.current_file)
        with open(self.log_file, "a", encoding="utf-8") as log:
            # a publish is logged at the time its manifest records (``published_at``)
            log.write(json.dumps({"at": iso(when or utc_now()), "action": action, "version": version_id}) + "\n")

    def _prune(self, retention: int | Retention | dict[str, int], now: datetime | None = None) -> list[str]:
        """Keep the versions ``retention`` names (``kept_versions``) and the current one; remove the others and the
        segments no kept or staged version names."""
        current = self.current()
        published = self.published_versions()
        times = {}
        for version in published:
            try:
                times[version] = self.published_at(version)
            except LivingMemoryError:  # an unreadable manifest: its id's time
                times[version] = id_time(version)
        keep = kept_versions(Retention.of(retention), times, now or utc_now()) | {current}
        removed = [v for v in published if v not in keep]
        for version in removed:
            shutil.rmtree(self.version_dir(version), ignore_errors=True)
        self._gc_vectors()
        return removed

    def _gc_vectors(self) -> None:
        from livemem.version.segments import gc_parts
        from livemem.version.vectors import gc_server_collections

        gc_server_collections(self.root, self.chroma_server)
        gc_parts(self.root, self.referenced_segments(), self.engine.serving_cache)

    def referenced_segments(self) -> set[str]:
        """Segments named by a published version or a complete staged one."""
        names: set[str] = set()
        for parent in (self.versions, self.staging):
            if not parent.is_dir():
                continue
            for d in parent.iterdir():
                try:
                    manifest = json.loads((d / MANIFEST).read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    continue
                names.update(e["id"] for e in manifest.get("segments") or [] if isinstance(e, dict) and "id" in e)
        return names

    def clear_staging(self, keep_latest: int = 0) -> list[str]:
        """Remove what no live writer owns from ``staging/`` (and the segments only it held); call with the write
        lock held. Every writer calls it before it stages (a build, ``derive_version``) and every publish after
        it switches (retention), so what a killed or disk-full writer left is gone by the next one.

        Every staging step holds the lock, so an incomplete directory (no manifest) now is the remains of a
        crashed writer: removed. A complete one awaits its checks and publish step, which run without the lock:
        it is kept while its owner is alive (``_owner_alive``), since taking it would make that run fail. One whose
        owner is gone (a check failed, or the writer was killed or ran out of disk before publishing) stays for
        inspection until the next writer comes, then goes (``keep_latest``: keep that many of the newest of them).
        A segment directory a killed writer left half-written (``parts/.tmp-*``) goes too.
        """
        if not self.staging.is_dir():
            return []
        staged = sorted(p.name for p in self.staging.iterdir() if p.is_dir())
        complete = [v for v in staged if (self.staged_dir(v) / MANIFEST).is_file()]
        abandoned = [v for v in complete if not self._owner_alive(v)]
        doomed = [v for v in staged if v not in complete] + abandoned[: max(0, len(abandoned) - keep_latest)]
        for version in doomed:
            shutil.rmtree(self.staged_dir(version), ignore_errors=True)
            self.owner_file(version).unlink(missing_ok=True)
        for record in self.staging.glob("*" + OWNER_SUFFIX):  # ids whose writer died before making the directory
            version = record.name.removesuffix(OWNER_SUFFIX)
            if version not in staged and not self._owner_alive(version):
                record.unlink(missing_ok=True)
        parts = self.root / PARTS
        if doomed:
            self._gc_vectors()
        elif parts.is_dir() and any(p.name.startswith(".tmp-") for p in parts.iterdir()):
            from livemem.version.segments import gc_parts

            # a segment half-written by a killed writer
            gc_parts(self.root, self.referenced_segments(), self.engine.serving_cache)
        return doomed

    def _owner_alive(self, version_id: str) -> bool:
        """Whether the writer that staged ``version_id`` may still check and publish it: its Dagster run has not
        finished (when the instance knows the run), else its process still runs (on another host: assumed), and
        the version is less than ``STALE_STAGING_S`` old. Unrecorded owners are gone."""
        owner = self.staging_owner(version_id)
        if owner is None:
            return False
        try:
            if time.time() - self.owner_file(version_id).stat().st_mtime > STALE_STAGING_S:
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


def id_time(version_id: str) -> datetime:
    """The UTC time a version id names (ids are ``%Y%m%dT%H%M%S`` + microseconds + ``Z``; epoch if it names none)."""
    try:
        return datetime.strptime(version_id[:21], "%Y%m%dT%H%M%S%f").replace(tzinfo=UTC)
    except ValueError:
        return datetime.fromtimestamp(0, UTC)


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


def derive_version(home: IndexHome, link: tuple[str, ...] = ()) -> tuple[str, Path, str | None]:
    """Stage a new version as a copy of the current one, for a step that changes only its own part of it.

    Returns (new version id, its staging directory, base version id). The caller holds ``home.write_lock()``,
    changes its own tables / files in the copy, writes the manifest with ``write_manifest``, and publishes with
    ``home.publish(version_id, base, retention)``: the base check there refuses to publish a copy of a version
    that is no longer current (another step published meanwhile), so no step ever drops another step's work.

    Entries named in ``link`` (e.g. ``chroma``, ``retrieval``) are hard-linked instead of copied: instant and
    free of disk, for a caller that promises not to modify them (the base version's files are shared).
    """
    home.ensure()
    home.clear_staging()  # what a killed or disk-full step left, when no live writer owns it
    base = home.current()
    version_id = home.new_version_id()
    staged = home.staged_dir(version_id)
    if base is None:
        staged.mkdir(parents=True)
    else:
        source = home.version_dir(base)
        staged.mkdir(parents=True)
        for entry in source.iterdir():
            if entry.name == MANIFEST:
                continue  # incomplete until the caller writes its own
            if entry.is_dir():
                copy = os.link if entry.name in link else shutil.copy2
                shutil.copytree(entry, staged / entry.name, copy_function=copy)
            elif entry.name in link:
                os.link(entry, staged / entry.name)
            else:
                shutil.copy2(entry, staged / entry.name)
    return version_id, staged, base


def write_manifest(staged: Path, manifest: dict[str, Any]) -> None:
    """Write ``manifest.json`` last: a staged directory without one is incomplete and is never published.

    It records the size and SHA-256 of every other file of the version (``files``, by path relative to the
    version directory), so serving can tell a damaged version from a good one before it answers from it
    (``livemem.version.reader.verify_files``). Every file and directory of the version is made private first
    (``private_tree``)."""
    private_tree(staged)
    files = {
        f.relative_to(staged).as_posix(): {"size": f.stat().st_size, "sha256": file_sha256(f)}
        for f in sorted(staged.rglob("*"))
        if f.is_file() and not (f.parent == staged and f.name.startswith(MANIFEST))
    }
    manifest["files"] = files
    own = dir_size_mb(staged)
    manifest["version_size_mb"] = own
    manifest["index_size_mb"] = round(own + segments_mb(parts_dir(staged), manifest.get("segments") or []), 3)
    tmp = staged / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2, ensure_ascii=False), encoding="utf-8")
    tmp.chmod(0o640)
    os.replace(tmp, staged / MANIFEST)


def private_tree(root: Path) -> None:
    """Take ``NOT_SHARED`` permissions off ``root`` and everything under it (files this user owns): a version's
    tables, RDF, GIS snapshot and Chroma files hold internal text."""
    for path in [root, *root.rglob("*")]:
        try:
            status = path.lstat()
            if stat.S_ISLNK(status.st_mode) or status.st_uid != os.geteuid():
                continue
            mode = stat.S_IMODE(status.st_mode)
            if mode & NOT_SHARED:
                path.chmod(mode & ~NOT_SHARED)
        except OSError:
            continue


def segments_mb(parts: Path, segments: list[dict[str, Any]]) -> float:
    """Bytes of the shared segments a version names (``manifest["segments"]``), in MB."""
    from livemem.version.segments import DamagedSegment, segment_meta

    total = 0
    for entry in segments:
        try:
            total += sum(f["size"] for f in segment_meta(parts, entry["id"])["files"].values())
        except DamagedSegment:
            continue
    return total / 1_048_576


def file_sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def dir_size_mb(path: Path) -> float:
    total = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return round(total / 1_048_576, 3)


def open_chroma(path: Path):
    """A persistent Chroma client on ``path`` with telemetry off (no network). ``chromadb`` is the optional ``chroma``
    extra, imported only here and in ``livemem.version.vectors`` (``require_chroma`` refuses a build that needs it
    when it is missing)."""
    import chromadb
    from chromadb.config import Settings

    return chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False))


def close_chroma(client: Any) -> None:
    """Release Chroma's files so the directory can be renamed, copied or opened elsewhere."""
    from chromadb.api.shared_system_client import SharedSystemClient

    try:
        client.close()
    finally:
        SharedSystemClient.clear_system_cache()
