"""The publisher of an index home: staging a version, the atomic switch of ``CURRENT``, rollback.

One writer per home at a time (``write_lock``). A version gets its id and its owner record (``new_version_id``)
before it is built in ``staging/``, either from scratch (a chunk build) or as a copy of the current version
(``derive``: a step that changes only its own part); its manifest is written last (``write_manifest``: a staged
directory without one is incomplete and never published). ``publish`` renames it into ``versions/`` and names it in
``CURRENT`` (both renames are atomic on one file system), logs the switch, then lets the janitor apply retention
(``livemem.version.janitor``); ``rollback`` points ``CURRENT`` back at an older published version. It reads the
home through its catalog (``livemem.version.catalog``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from datetime import datetime
from pathlib import Path
from typing import Any

from filelock import FileLock

from livemem.dates import iso, utc_now
from livemem.errors import LivingMemoryError, PublishConflict
from livemem.sources.config import Retention
from livemem.version import parts_dir
from livemem.version.catalog import MANIFEST, NOT_SHARED, VersionCatalog
from livemem.version.janitor import HomeJanitor
from livemem.version.owners import Owner


class Publisher:
    """Stages, publishes and rolls back the versions of one index home."""

    def __init__(self, catalog: VersionCatalog, janitor: HomeJanitor) -> None:
        self.catalog = catalog
        self.janitor = janitor
        # Who stages through this publisher (the Dagster resource sets its run; None: this process).
        self.owner: Owner | None = None

    def write_lock(self, timeout: float = 600) -> FileLock:
        """Held while staging or publishing: one writer per index home (DuckDB files have one writer)."""
        self.catalog.make_root()
        return FileLock(str(self.catalog.root / ".write.lock"), timeout=timeout)

    def new_version_id(self) -> str:
        """A new version id (ids sort by creation time), recorded as this writer's (``staging/<id>.owner.json``)
        before its directory exists, so that no other writer's ``clear_staging`` takes it while it is alive."""
        now = utc_now()
        version_id = now.strftime("%Y%m%dT%H%M%S") + f"{now.microsecond:06d}Z"
        self.catalog.staging.mkdir(parents=True, exist_ok=True)
        owner = self.owner or Owner.this_process()
        self.catalog.owner_file(version_id).write_text(json.dumps(owner.to_dict()), encoding="utf-8")
        return version_id

    def record_staged_by(self, version_id: str, run_id: str) -> None:
        """Write into a staged version's manifest which run staged it (``publish`` checks it). Only the run id:
        the manifest is served (``/manifest``), while host and pid stay in the owner record, removed at publish."""
        path = self.catalog.staged_dir(version_id) / MANIFEST
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
        catalog = self.catalog
        with self.write_lock():
            staged = self._publishable(version_id, expected_base, run_id)
            when = now or utc_now()
            self.stamp_published(staged, when)
            catalog.versions.mkdir(parents=True, exist_ok=True)
            os.replace(staged, catalog.version_dir(version_id))
            catalog.owner_file(version_id).unlink(missing_ok=True)
            self.switch(version_id, "publish", when)
            # retention covers staging too: what no live writer owns goes with the old versions
            self.janitor.clear_staging()
            return self.janitor.prune(retention, now)

    def _publishable(self, version_id: str, expected_base: str | None, run_id: str | None) -> Path:
        """The staged directory of ``version_id`` when it may be published now (see ``publish``), else raises."""
        current = self.catalog.current()
        if current != expected_base:
            raise PublishConflict(
                f"version {version_id} was built on {expected_base or 'an empty index'}, but {current} "
                "has been published since; materialize again to build on the newer version"
            )
        staged = self.catalog.staged_dir(version_id)
        if not (staged / MANIFEST).is_file():
            raise LivingMemoryError(f"staged version {version_id} is missing or incomplete ({staged})")
        if run_id is not None:
            staged_by = json.loads((staged / MANIFEST).read_text(encoding="utf-8")).get("staged_by") or {}
            if staged_by.get("run_id") != run_id:
                raise LivingMemoryError(
                    f"version {version_id} was staged by {staged_by.get('run_id') or 'no recorded run'}, not by "
                    f"run {run_id}: a run publishes only the version it staged and checked itself"
                )
        return staged

    @staticmethod
    def stamp_published(staged: Path, when: datetime) -> None:
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
            if not (self.catalog.version_dir(version_id) / MANIFEST).is_file():
                raise LivingMemoryError(f"no published version {version_id!r} under {self.catalog.versions}")
            self.switch(version_id, "rollback")

    def switch(self, version_id: str, action: str, when: datetime | None = None) -> None:
        """Name ``version_id`` in ``CURRENT`` (a temp file renamed over it) and log the switch."""
        tmp = self.catalog.current_file.with_name(f".CURRENT.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(version_id + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.catalog.current_file)
        with open(self.catalog.log_file, "a", encoding="utf-8") as log:
            # a publish is logged at the time its manifest records (``published_at``)
            log.write(json.dumps({"at": iso(when or utc_now()), "action": action, "version": version_id}) + "\n")

    def derive(self, link: tuple[str, ...] = ()) -> tuple[str, Path, str | None]:
        """Stage a new version as a copy of the current one (``livemem.version.store.derive_version``)."""
        catalog = self.catalog
        catalog.ensure()
        self.janitor.clear_staging()  # what a killed or disk-full step left, when no live writer owns it
        base = catalog.current()
        version_id = self.new_version_id()
        staged = catalog.staged_dir(version_id)
        if base is None:
            staged.mkdir(parents=True)
        else:
            source = catalog.version_dir(base)
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
    (``livemem.engine.snapshot.verify_files``). Every file and directory of the version is made private first
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
    """The SHA-256 of a file's bytes, in hex."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def dir_size_mb(path: Path) -> float:
    """Bytes of the files under ``path``, in MB (3 decimals)."""
    total = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return round(total / 1_048_576, 3)
