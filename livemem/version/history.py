"""The index's history: the kept versions, when each was published and what it holds, which version answered at a
given time or held a given commit, and the disk the history costs (docs/versions.md).

Every published version is immutable and shares its segments with the others, so the history is the kept versions
themselves; this module only reads it. Times come from the index home: ``published_at`` in each manifest (written
by ``IndexHome.publish``) and ``publish_log.jsonl`` (every publish and rollback).

Resolving ``as_of``:

- **A date-time** (ISO 8601; no offset means UTC): the version that was ``CURRENT`` at that instant, by replaying
  the publish log (a rollback makes the older version current again from its time on). A version the log does not
  name (published before the log existed) counts from its ``published_at``. A date alone (``2026-10-01``) means the
  end of that day (UTC): what the memory answered when the day ended, the version daily retention keeps for it.
- **A commit** (4 to 40 hex digits) of any source: the *newest* kept version whose source head is that commit
  (``head_commit`` of a source in its manifest; a prefix must name one commit): the commit's content with
  everything published on top of it (attention, registry, GBIM) as late as it is kept. ``holding_commit(...,
  newest=False)`` gives the earliest, the version that first published it.

Anything that names no kept version is ``VersionNotFound`` saying what was asked and what is kept; text that is
neither is ``BadVersionReference``.
"""

from __future__ import annotations

import contextlib
import re
import stat
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from pathlib import Path
from typing import Any

from livemem.errors import LivingMemoryError
from livemem.version.store import MANIFEST, IndexHome

COMMIT = re.compile(r"^[0-9a-fA-F]{4,40}$")
VERSION_ID = re.compile(r"\d{8}T\d{12}Z")  # whole (``fullmatch``): ``$`` would let a trailing newline through


class VersionNotFound(LivingMemoryError):
    """A version id, time or commit that names no kept version."""


class BadVersionReference(LivingMemoryError):
    """``as_of`` that is neither an ISO date-time nor a commit, or ``version`` that is not a version id."""


@dataclass(frozen=True)
class Resolution:
    """Which version a ``version`` / ``as_of`` names, whether it is ``CURRENT``, and how it was found."""

    version_id: str
    current: bool
    how: str  # "version", "current", "as_of_time", "as_of_commit"
    asked: str | None = None  # what the caller gave

    def to_dict(self) -> dict[str, Any]:
        return {"version_id": self.version_id, "current": self.current, "how": self.how, "asked": self.asked}


def list_versions(home: IndexHome, access: frozenset[str] | None = None) -> list[dict[str, Any]]:
    """Every kept version, oldest first: id, whether current, published and created times, base version, each
    source's commit and counts, totals, GBIM and registry counts, and its sizes (from the manifests only).

    With ``access`` (a role's levels), as ``/manifest`` shows a version to that role: sources it may not read are
    left out, counts are those of the sources it may read, and sizes (which count every chunk) are left out when
    some source is hidden."""
    current = home.current()
    rows = []
    for version in home.published_versions():
        manifest = home.manifest(version)
        rows.append(summary(home, version, manifest, current, access))
    return rows


def summary(
    home: IndexHome,
    version: str,
    manifest: dict[str, Any],
    current: str | None,
    access: frozenset[str] | None = None,
) -> dict[str, Any]:
    """One version as ``list_versions`` lists it."""
    found_gbim, found_registry = manifest.get("gbim"), manifest.get("registry")
    gbim: dict[str, Any] = found_gbim if isinstance(found_gbim, dict) else {}
    registry: dict[str, Any] = found_registry if isinstance(found_registry, dict) else {}
    all_sources = manifest.get("sources") or {}
    readable = {n: i for n, i in all_sources.items() if access is None or i.get("access", "public") in access}
    gbim_hidden = access is not None and any(
        s.get("access", "public") not in access for s in (gbim.get("sources") or {}).values()
    )
    sources = {
        name: {
            "commit": info.get("head_commit"),
            "collection": info.get("collection"),
            "access": info.get("access", "public"),
            "files": info.get("files"),
            "chunks": info.get("chunks"),
        }
        for name, info in sorted(readable.items())
    }
    whole = len(readable) == len(all_sources) and not gbim_hidden
    return {
        "version_id": version,
        "current": version == current,
        "published_at": _iso(home.published_at(version, manifest)),
        "created_at": manifest.get("created_at"),
        "base_version": manifest.get("base_version"),
        "sources": sources,
        "counts": {
            "chunks": sum(int(i.get("chunks") or 0) for i in readable.values()),
            "files": sum(int(i.get("files") or 0) for i in readable.values()),
            "sealed_chunks": sum(int(i.get("sealed_chunks") or 0) for i in readable.values()),
            "gbim_entities": None if gbim_hidden else gbim.get("entities"),
            "gbim_relations": None if gbim_hidden else gbim.get("relations"),
            "registry_rows": registry.get("published"),
        },
        "version_size_mb": manifest.get("version_size_mb") if whole else None,
        "index_size_mb": manifest.get("index_size_mb") if whole else None,
    }


# --- resolving ----------------------------------------------------------------------------------------------
def resolve(
    home: IndexHome, version: str | None = None, as_of: str | None = None, access: frozenset[str] | None = None
) -> Resolution:
    """The version a request names: ``version`` (an id, or ``current``), else ``as_of`` (a date-time or a commit),
    else ``CURRENT``. Both given must name the same version. With ``access``, a commit matches only sources those
    access levels may read (a commit of another source is not found, as if it did not exist)."""
    current = home.current()
    if current is None:
        raise VersionNotFound(f"no index version is published under {home.root} yet")
    chosen: Resolution | None = None
    if version is not None:
        chosen = by_id(home, version, current)
    if as_of is not None:
        found = by_as_of(home, as_of, current, access)
        if chosen is not None and found.version_id != chosen.version_id:
            raise BadVersionReference(
                f"version {version!r} and as_of {as_of!r} name different versions ({chosen.version_id} and "
                f"{found.version_id}); give one of them"
            )
        chosen = chosen or found
    return chosen or Resolution(current, True, "current")


def lookup(home: IndexHome, ref: str, access: frozenset[str] | None = None) -> Resolution:
    """A version named any way the CLI accepts: an id, ``current``, a date-time or a commit; exactly as given (a
    reference with a space or a line break around it names nothing)."""
    text = ref
    if text.lower() == "current" or VERSION_ID.fullmatch(text):
        return by_id(home, text)
    return by_as_of(home, text, access=access)


def by_id(home: IndexHome, version: str, current: str | None = None) -> Resolution:
    """The version an id (or ``current``) names, exactly as given: one with a space or a newline around it is not an
    id (``lookup`` strips what an operator typed before it asks)."""
    current = home.current() if current is None else current
    text = version
    if text.lower() == "current":
        if current is None:
            raise VersionNotFound(f"no index version is published under {home.root} yet")
        return Resolution(current, True, "current", version)
    if not VERSION_ID.fullmatch(text):
        raise BadVersionReference(
            f"version {version!r} is not a version id (like 20261122T003458158104Z) nor 'current'; "
            "use as_of for a date-time or a commit"
        )
    if not (home.version_dir(text) / MANIFEST).is_file():
        raise VersionNotFound(f"no kept version {text!r}; {_kept(home)}")
    return Resolution(text, text == current, "version", version)


def by_as_of(
    home: IndexHome, as_of: str, current: str | None = None, access: frozenset[str] | None = None
) -> Resolution:
    current = home.current() if current is None else current
    text = as_of
    when = parse_time(text) if text == text.strip() else None
    if when is not None:
        version = current_at(home, when)
        return Resolution(version, version == current, "as_of_time", as_of)
    if COMMIT.fullmatch(text):
        version = holding_commit(home, text, access=access)
        return Resolution(version, version == current, "as_of_commit", as_of)
    raise BadVersionReference(
        f"as_of {as_of!r} is neither an ISO 8601 date-time (2026-10-01T09:00:00Z, 2026-10-01) nor a commit "
        "(4 to 40 hex digits)"
    )


def parse_time(text: str) -> datetime | None:
    """An ISO 8601 date-time (UTC when it gives no offset) or date (the end of that UTC day); None for text that is
    neither, or that could be a commit (digits only)."""
    if not re.search(r"[-:T ]", text):
        return None  # 20261001 could be a commit prefix: a date must be written with dashes
    try:
        day = date.fromisoformat(text)
    except ValueError:
        day = None
    if day is not None and len(text) <= 10:
        return datetime.combine(day, time.max, UTC)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def timeline(home: IndexHome) -> list[tuple[datetime, str, str]]:
    """Every switch of ``CURRENT`` (time, action, version), oldest first: the publish log, plus a publish at its
    ``published_at`` for each kept version the log never names."""
    events: list[tuple[datetime, str, str]] = []
    named = set()
    for event in home.publish_log():
        when = parse_time(str(event["at"]))
        if when is None:
            continue
        events.append((when, str(event["action"]), str(event["version"])))
        named.add(str(event["version"]))
    for version in home.published_versions():
        if version not in named:
            try:
                events.append((home.published_at(version), "publish", version))
            except LivingMemoryError:
                continue
    events.sort(key=lambda e: e[0])
    return events


def current_at(home: IndexHome, when: datetime) -> str:
    """The version ``CURRENT`` named at ``when``; VersionNotFound when nothing was published yet then, or when
    that version is no longer kept (retention removed it)."""
    events = timeline(home)
    before = [e for e in events if e[0] <= when]
    if not before:
        oldest = f"the first publish was at {_iso(events[0][0])}" if events else "nothing is published"
        raise VersionNotFound(f"no version was published at {_iso(when)} or before ({oldest})")
    at, _action, version = before[-1]
    if not (home.version_dir(version) / MANIFEST).is_file():
        raise VersionNotFound(
            f"version {version} was current at {_iso(when)} (since {_iso(at)}) but is no longer kept (retention, "
            f"`index.retention` in the sources file); {_kept(home)}"
        )
    return version


def holding_commit(home: IndexHome, commit: str, newest: bool = True, access: frozenset[str] | None = None) -> str:
    """The newest (or earliest) kept version whose head commit of some source (one ``access`` may read, when
    given) is ``commit`` (or starts with it)."""
    prefix = commit.lower()
    matches: list[tuple[str, str, str]] = []  # version, source, full commit
    for version in home.published_versions():
        try:
            sources = home.manifest(version).get("sources") or {}
        except LivingMemoryError:
            continue
        for name, info in sources.items():
            if access is not None and info.get("access", "public") not in access:
                continue
            head = str(info.get("head_commit") or "")
            if head.startswith(prefix):
                matches.append((version, name, head))
    commits = sorted({m[2] for m in matches})
    if not matches:
        raise VersionNotFound(f"no kept version holds commit {commit} of any source; {_kept(home)}")
    if len(commits) > 1:
        raise BadVersionReference(
            f"commit prefix {commit} is ambiguous: it names {', '.join(c[:12] for c in commits)}; give more digits"
        )
    versions = sorted({m[0] for m in matches})
    return versions[-1] if newest else versions[0]


def _kept(home: IndexHome) -> str:
    kept = home.published_versions()
    if not kept:
        return "no version is kept"
    return f"kept: {len(kept)} versions, {kept[0]} to {kept[-1]} (`livemem versions`, GET /versions)"


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


# --- disk -----------------------------------------------------------------------------------------------------
def disk_usage(home: IndexHome) -> dict[str, Any]:
    """What the index home's versions take on disk, in MB: the kept versions' own directories, the shared segments
    (``parts/``), the serving copies, and what keeping history costs: the segments only non-current versions hold
    plus those versions' own directories (``history_mb``, and as a share of what the current version alone needs)."""
    current = home.current()
    seen: set[tuple[int, int]] = set()  # a file hard-linked into several versions (``derive_version``) counts once
    own = {v: _dir_bytes(home.version_dir(v), seen) for v in home.published_versions()}
    parts = home.root / "parts"
    segment_bytes = {p.name: _dir_bytes(p, seen) for p in sorted(parts.iterdir())} if parts.is_dir() else {}
    held_by_current: set[str] = set()
    if current:
        with contextlib.suppress(LivingMemoryError):
            held_by_current = {e["id"] for e in home.manifest(current).get("segments") or [] if "id" in e}
    current_bytes = own.get(current or "", 0) + sum(b for s, b in segment_bytes.items() if s in held_by_current)
    history_bytes = sum(b for v, b in own.items() if v != current) + sum(
        b for s, b in segment_bytes.items() if s not in held_by_current
    )
    mb = 1_048_576
    return {
        "versions": len(own),
        "versions_mb": round(sum(own.values()) / mb, 3),
        "per_version_mb": {v: round(b / mb, 3) for v, b in own.items()},
        "segments": len(segment_bytes),
        "segments_mb": round(sum(segment_bytes.values()) / mb, 3),
        "serving_copies_mb": round(_dir_bytes(home.cache_dir / "serving", seen) / mb, 3),
        "current_mb": round(current_bytes / mb, 3),
        "history_mb": round(history_bytes / mb, 3),
        "history_pct": round(100 * history_bytes / current_bytes, 2) if current_bytes else None,
    }


def _dir_bytes(path: Path, seen: set[tuple[int, int]]) -> int:
    total = 0
    try:
        for f in path.rglob("*"):
            try:
                status = f.lstat()
                if stat.S_ISREG(status.st_mode) and (status.st_dev, status.st_ino) not in seen:
                    seen.add((status.st_dev, status.st_ino))
                    total += status.st_size
            except OSError:
                continue
    except OSError:
        return 0
    return total


def previous_published(home: IndexHome, version: str) -> str | None:
    """The kept version published just before ``version`` (by publish time), or None."""
    times = {}
    for v in home.published_versions():
        try:
            times[v] = home.published_at(v)
        except LivingMemoryError:
            continue
    if version not in times:
        return None
    earlier = [v for v in times if (times[v], v) < (times[version], version)]
    return max(earlier, key=lambda v: (times[v], v)) if earlier else None


__all__ = [
    "BadVersionReference",
    "Resolution",
    "VersionNotFound",
    "by_as_of",
    "by_id",
    "current_at",
    "disk_usage",
    "holding_commit",
    "list_versions",
    "lookup",
    "parse_time",
    "previous_published",
    "resolve",
]
