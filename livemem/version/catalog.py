"""The catalog of an index home: its layout, which versions exist, which one is current, and what the home records.

It owns the names of the home's directories and files (``livemem.version.store`` shows the layout), reads them and
never changes a version: ``CURRENT`` (the published version), ``versions/`` (published versions, oldest first),
``staging/`` (versions being built and who staged them), each version's manifest, ``publish_log.jsonl`` (every
switch of ``CURRENT``) and when a version was published. Writing belongs to the publisher
(``livemem.version.publisher``), removing to the janitor (``livemem.version.janitor``).
"""

from __future__ import annotations

import json
import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from livemem.errors import LivingMemoryError
from livemem.version.owners import Owner

MANIFEST = "manifest.json"
TABLES = "tables.duckdb"
OWNER_SUFFIX = ".owner.json"
# Who may read the index home (versions, segments and caches hold internal text, so nothing there may be 0644):
# the home directory is 0750 (the service's user, and a group it chooses, e.g. a serving user's), so nothing under
# it is reachable by other users whatever their own modes; a version's files and directories lose every
# permission for others and write for the group when its manifest is written (``private_tree``: 0640 / 0750),
# segments are 0440 (``livemem.version.segments``), serving copies 0440 under a 0700 directory
# (``livemem.version.mapped``).
HOME_MODE = 0o750
NOT_SHARED = 0o027  # permission bits a version's files never keep: group write, everything for others


class VersionCatalog:
    """The layout of one index home directory (``RAG_INDEX_DIR``) and what its records say."""

    def __init__(self, root: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root).resolve()
        self.versions = self.root / "versions"
        self.staging = self.root / "staging"
        # Another home's cache may be shared (``verify --rebuild`` rebuilds into a temporary home with the live
        # home's embeddings, holding the live home's write lock so no build writes the cache meanwhile).
        self.cache_dir = Path(cache_dir).resolve() if cache_dir else self.root / "cache"
        self.traces = self.root / "traces"
        self.current_file = self.root / "CURRENT"
        self.log_file = self.root / "publish_log.jsonl"

    def ensure(self) -> None:
        """Create the home and its directories (``HOME_MODE``)."""
        self.make_root()
        for d in (self.versions, self.staging, self.cache_dir, self.traces):
            d.mkdir(mode=HOME_MODE, parents=True, exist_ok=True)

    def make_root(self) -> None:
        """Create the home directory, or narrow it, to ``HOME_MODE`` (a directory another user owns is left as it
        is: it is theirs to set)."""
        self.root.mkdir(mode=HOME_MODE, parents=True, exist_ok=True)
        try:
            status = self.root.stat()
            if status.st_uid == os.geteuid() and stat.S_IMODE(status.st_mode) & ~HOME_MODE:
                self.root.chmod(stat.S_IMODE(status.st_mode) & HOME_MODE)
        except OSError:  # a read-only mount: nothing this process writes there anyway
            pass

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

    def owner_file(self, version_id: str) -> Path:
        return self.staging / f"{version_id}{OWNER_SUFFIX}"

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

    def staging_owner(self, version_id: str) -> Owner | None:
        """Who staged ``version_id`` (None when not recorded or unreadable)."""
        try:
            return Owner.from_dict(json.loads(self.owner_file(version_id).read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            return None

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
        for value in (manifest.get("published_at"), self.first_published().get(version_id)):
            if value:
                try:
                    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).astimezone(UTC)
                except ValueError:
                    pass
        return id_time(version_id)

    def first_published(self) -> dict[str, str]:
        """When each version was first published, by the log (version → ``at``)."""
        first: dict[str, str] = {}
        for event in self.publish_log():
            if event["action"] == "publish":
                first.setdefault(event["version"], event["at"])
        return first

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


def id_time(version_id: str) -> datetime:
    """The UTC time a version id names (ids are ``%Y%m%dT%H%M%S`` + microseconds + ``Z``; epoch if it names none)."""
    try:
        return datetime.strptime(version_id[:21], "%Y%m%dT%H%M%S%f").replace(tzinfo=UTC)
    except ValueError:
        return datetime.fromtimestamp(0, UTC)
