"""What changed between two index versions, as JSON (docs/versions.md): files and chunks added, removed and changed
per source, registry rows and GBIM entities changed, and attention moved (top movers).

Chunk ids are content addressed (``livemem.index.records.chunk_id``: source, path, text, occurrence), so a chunk
whose id is in both versions is unchanged. Within a file held by both, the chunks only the older version holds and
those only the newer one holds are paired in order of their position in the file: a pair is a *changed* chunk (the
same place in the file, new text), the rest are added or removed. A file is changed when its chunks or its commit
differ. With ``access`` (a role's access levels) only the sources, chunks, files and GBIM entities that role may
read are compared, counted or named: a diff never shows a role what ``/query`` would not.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import duckdb

from livemem.errors import LivingMemoryError
from livemem.version import connect
from livemem.version.store import IndexHome

MAX_LISTED = 50  # ids / files listed per kind; counts are always complete
TOP_MOVERS = 10
# Other steps' tables in a version (livemem.registry.stage, livemem.gbim.export; named here because the version
# layer sits below those steps)
REGISTRY_TABLE = "registry"
ENTITY_TABLE = "gbim_entities"
RELATION_TABLE = "gbim_relations"


@dataclass
class _Side:
    """What one version holds, read for the diff."""

    manifest: dict[str, Any]
    chunks: dict[str, tuple[str, str, int]] = field(default_factory=dict)  # id -> source, path, chunk_index
    files: dict[tuple[str, str], tuple[str | None, int | None]] = field(default_factory=dict)  # -> commit, size
    attention: dict[str, float] = field(default_factory=dict)
    registry: dict[str, tuple[str, str]] | None = None  # id -> content hash, status
    entities: dict[str, tuple[str, str]] | None = None  # id -> digest, label
    relations: set[tuple[str, str, str]] | None = None
    visible_per_source: dict[str, int] = field(default_factory=dict)  # chunks the caller may read, per source


def diff_versions(
    home: IndexHome,
    a: str,
    b: str,
    access: frozenset[str] | None = None,
    top: int = TOP_MOVERS,
    limit: int = MAX_LISTED,
) -> dict[str, Any]:
    """What changed from version ``a`` to version ``b`` (either order; both must exist in ``home``), as seen by a
    caller with ``access`` (None: everything, for operators)."""
    # Two versions holding the same rows of the same (immutable) segments hold the same chunks and files: an
    # attention, registry or GBIM publish. Then only the chunks with attention are read (for the movers).
    try:
        same = _membership(home, a) == _membership(home, b)
        old, new = _read(home, a, access, full=not same), _read(home, b, access, full=not same)
    except (duckdb.Error, OSError) as exc:  # a damaged or unreadable version: an error that names it
        raise LivingMemoryError(f"versions {a} and {b} cannot be compared: {type(exc).__name__}: {exc}") from exc
    sources = sorted(set(old.manifest.get("sources") or {}) | set(new.manifest.get("sources") or {}))
    sources = [s for s in sources if _source_visible(s, old, new, access)]
    per_source = _per_source(sources, old, new)
    files_listed, chunks = _file_changes(old, new, same, per_source, limit)
    files_total = sum(sum(v["files"].values()) for v in per_source.values())
    totals = {kind: sum(v["chunks"][kind] for v in per_source.values()) for kind in ("added", "removed", "changed")}
    result = {
        "from": _side_info(home, a, old.manifest),
        "to": _side_info(home, b, new.manifest),
        "sources": per_source,
        "files": files_listed,
        "files_total": files_total,
        "chunks": {**chunks, "totals": totals},
        "registry": _registry_diff(old, new, limit),
        "gbim": _gbim_diff(old, new, limit),
        "attention": _attention_diff(old, new, top),
        "listed_at_most": limit,
    }
    result["summary"] = summary_line(result)
    return result


def _per_source(sources: list[str], old: _Side, new: _Side) -> dict[str, dict[str, Any]]:
    """Each compared source's entry of the diff: its head commit in both versions, file and chunk counts at zero."""
    return {
        s: {
            "commit": {
                "from": ((old.manifest.get("sources") or {}).get(s) or {}).get("head_commit"),
                "to": ((new.manifest.get("sources") or {}).get(s) or {}).get("head_commit"),
            },
            "files": {"added": 0, "removed": 0, "changed": 0},
            "chunks": {"added": 0, "removed": 0, "changed": 0, "unchanged": 0},
        }
        for s in sources
    }


def _file_changes(
    old: _Side, new: _Side, same: bool, per_source: dict[str, dict[str, Any]], limit: int
) -> tuple[list[dict[str, Any]], dict[str, list]]:
    """Count, per source of ``per_source``, the files and chunks added, removed, changed and unchanged; returns the
    files and chunk ids listed (at most ``limit`` of each kind)."""
    files_listed: list[dict[str, Any]] = []
    chunks: dict[str, list] = {"added": [], "removed": [], "changed": []}
    gone_by_file, came_by_file, old_files, new_files, candidates = _candidates(old, new, same, per_source)
    for key in sorted(candidates):
        source, path = key
        if source not in per_source:
            continue
        gone = [cid for _, cid in gone_by_file.get(key, [])]
        came = [cid for _, cid in came_by_file.get(key, [])]
        in_old, in_new = key in old_files, key in new_files
        if in_old and in_new:
            pairs = list(zip(gone, came, strict=False))
            removed, added = gone[len(pairs) :], came[len(pairs) :]
            change = "changed"
        else:
            pairs, removed, added = [], gone, came
            change = "added" if in_new else "removed"
        counts = per_source[source]["chunks"]
        counts["added"] += len(added)
        counts["removed"] += len(removed)
        counts["changed"] += len(pairs)
        per_source[source]["files"][change] += 1
        if len(files_listed) < limit:
            files_listed.append(
                {
                    "source": source,
                    "path": path,
                    "change": change,
                    "chunks_added": len(added),
                    "chunks_removed": len(removed),
                    "chunks_changed": len(pairs),
                }
            )
        _extend(chunks["added"], added, limit)
        _extend(chunks["removed"], removed, limit)
        _extend(chunks["changed"], [{"from": o, "to": n} for o, n in pairs], limit)
    return files_listed, chunks


def _candidates(old: _Side, new: _Side, same: bool, per_source: dict[str, dict[str, Any]]) -> tuple:
    """Count the unchanged chunks per source and find the files to look at one by one: (chunks only the old version
    holds by file, those only the new one holds by file, the old version's files, the new one's, the files that
    hold a chunk one version lacks or whose parent row differs)."""
    # Set operations first (in C): only the files holding a chunk one version lacks, or whose parent row differs,
    # are looked at one by one; the rest only count as unchanged (an attention publish: none at all).
    if same:
        for source, count in new.visible_per_source.items():
            if source in per_source:
                per_source[source]["chunks"]["unchanged"] = count
        return {}, {}, set(), set(), set()
    common = old.chunks.keys() & new.chunks.keys()
    gone_by_file = _by_file({c: old.chunks[c] for c in old.chunks.keys() - common})
    came_by_file = _by_file({c: new.chunks[c] for c in new.chunks.keys() - common})
    for cid in common:
        source = new.chunks[cid][0]
        if source in per_source:
            per_source[source]["chunks"]["unchanged"] += 1
    old_files = old.files.keys() | {v[:2] for v in old.chunks.values()}
    new_files = new.files.keys() | {v[:2] for v in new.chunks.values()}
    candidates = set(gone_by_file) | set(came_by_file) | (old_files ^ new_files)
    candidates |= {k for k in old.files.keys() & new.files.keys() if old.files[k] != new.files[k]}
    return gone_by_file, came_by_file, old_files, new_files, candidates


def summary_line(diff: dict[str, Any]) -> str:
    """One line for a log or the Dagster UI: what changed from one version to the other."""
    t = diff["chunks"]["totals"]
    parts = [
        f"{diff['files_total']} files changed",
        f"chunks +{t['added']} -{t['removed']} ~{t['changed']}",
    ]
    reg = diff["registry"]
    if reg is not None and (reg["added"] or reg["removed"] or reg["changed"]):
        parts.append(f"registry +{reg['added']} -{reg['removed']} ~{reg['changed']}")
    gbim = diff["gbim"]
    if gbim is not None:
        e = gbim["entities"]
        if e["added"] or e["removed"] or e["changed"]:
            parts.append(f"GBIM entities +{e['added']} -{e['removed']} ~{e['changed']}")
    if diff["attention"]["moved"]:
        parts.append(f"attention moved on {diff['attention']['moved']} chunks")
    return f"{diff['from']['version_id']} → {diff['to']['version_id']}: " + ", ".join(parts)


# --- reading ------------------------------------------------------------------------------------------------
def _membership(home: IndexHome, version: str) -> tuple:
    """The segments a version holds and the rows of them it does not (``livemem.version.segments``), sorted."""
    con = connect(home.locate(version))
    try:
        return tuple(
            sorted(con.execute(f"SELECT * FROM {table}").fetchall())
            for table in ("held_segments", "chunk_deletes", "parent_deletes")
        )
    except duckdb.CatalogException:  # an older layout: compare everything
        return ("unknown", version)
    finally:
        con.close()


def _read(home: IndexHome, version: str, access: frozenset[str] | None, full: bool = True) -> _Side:
    """What the diff compares of one version; ``full=False`` (the other version holds the same rows): only the
    chunks with attention and the number of chunks per source, no files."""
    side = _Side(home.manifest(version))
    con = connect(home.locate(version))
    try:
        names = "SELECT table_name FROM duckdb_tables() UNION SELECT view_name FROM duckdb_views()"
        tables = {r[0] for r in con.execute(names).fetchall()}
        rows = "SELECT chunk_id, source, path, chunk_index, access FROM chunks"
        if not full:
            rows += " WHERE chunk_id IN (SELECT chunk_id FROM attention)" if "attention" in tables else " LIMIT 0"
            for source, level, count in con.execute(
                "SELECT source, access, COUNT(*) FROM chunks GROUP BY ALL"
            ).fetchall():
                if access is None or level in access:
                    side.visible_per_source[source] = side.visible_per_source.get(source, 0) + count
        for cid, source, path, index, level in con.execute(rows).fetchall():
            if access is None or level in access:
                side.chunks[cid] = (source, path, index)
        if full:
            for source, path, commit, size, level in con.execute(
                "SELECT source, path, commit_sha, size, access FROM parents"
            ).fetchall():
                if access is None or level in access:
                    side.files[(source, path)] = (commit, size)
        if "attention" in tables:
            for cid, score in con.execute("SELECT chunk_id, attention_score FROM attention").fetchall():
                if cid in side.chunks:
                    side.attention[cid] = float(score)
        if REGISTRY_TABLE in tables:
            side.registry = {
                rid: (digest, status)
                for rid, digest, status in con.execute(
                    f"SELECT local_resource_id, content_hash, status FROM {REGISTRY_TABLE}"
                ).fetchall()
            }
        if ENTITY_TABLE in tables:
            hidden: set[str] = set()
            side.entities = {}
            for eid, level, digest, label in con.execute(
                f"SELECT entity_id, access, md5(concat_ws('|', label, description, attributes, county, "
                f"CAST(lon AS VARCHAR), CAST(lat AS VARCHAR), dataset)), label FROM {ENTITY_TABLE}"
            ).fetchall():
                if access is None or level in access:
                    side.entities[eid] = (digest, label)
                else:
                    hidden.add(eid)
            if RELATION_TABLE in tables:
                side.relations = {
                    (s, p, o)
                    for s, p, o in con.execute(f"SELECT subject, predicate, object FROM {RELATION_TABLE}").fetchall()
                    if s not in hidden and o not in hidden
                }
    finally:
        con.close()
    return side


def _source_visible(source: str, old: _Side, new: _Side, access: frozenset[str] | None) -> bool:
    if access is None:
        return True
    for side in (old, new):
        info = (side.manifest.get("sources") or {}).get(source)
        if info is not None and info.get("access", "public") not in access:
            return False
    return True


def _by_file(chunks: dict[str, tuple[str, str, int]]) -> dict[tuple[str, str], list[tuple[int, str]]]:
    files: dict[tuple[str, str], list[tuple[int, str]]] = defaultdict(list)
    for cid, (source, path, index) in chunks.items():
        files[(source, path)].append((index, cid))
    for rows in files.values():
        rows.sort()
    return files


def _extend(listed: list, items: list, limit: int) -> None:
    listed.extend(items[: max(0, limit - len(listed))])


def _side_info(home: IndexHome, version: str, manifest: dict[str, Any]) -> dict[str, Any]:
    published = (home.version_dir(version) / "manifest.json").is_file()  # else staged: not published yet
    return {
        "version_id": version,
        "published_at": home.published_at(version, manifest).isoformat().replace("+00:00", "Z") if published else None,
        "current": version == home.current(),
    }


def _keyed_diff(
    old: dict[str, tuple[str, str]], new: dict[str, tuple[str, str]], limit: int
) -> tuple[dict[str, int], dict[str, list[str]]]:
    added = sorted(new.keys() - old.keys())
    removed = sorted(old.keys() - new.keys())
    changed = sorted(k for k in old.keys() & new.keys() if old[k] != new[k])
    counts = {"added": len(added), "removed": len(removed), "changed": len(changed)}
    return counts, {"added_ids": added[:limit], "removed_ids": removed[:limit], "changed_ids": changed[:limit]}


def _registry_diff(old: _Side, new: _Side, limit: int) -> dict[str, Any] | None:
    if old.registry is None and new.registry is None:
        return None
    counts, ids = _keyed_diff(old.registry or {}, new.registry or {}, limit)
    return {**counts, **ids}


def _gbim_diff(old: _Side, new: _Side, limit: int) -> dict[str, Any] | None:
    if old.entities is None and new.entities is None:
        return None
    counts, ids = _keyed_diff(old.entities or {}, new.entities or {}, limit)
    before, after = old.relations or set(), new.relations or set()
    return {
        "entities": {**counts, **ids},
        "relations": {"added": len(after - before), "removed": len(before - after)},
    }


def _attention_diff(old: _Side, new: _Side, top: int) -> dict[str, Any]:
    ids = (old.attention.keys() | new.attention.keys()) & (old.chunks.keys() | new.chunks.keys())
    deltas = [(new.attention.get(c, 0.0) - old.attention.get(c, 0.0), c) for c in ids]
    moved = [(d, c) for d, c in deltas if abs(d) > 1e-12]
    moved.sort(key=lambda x: (-abs(x[0]), x[1]))
    movers = []
    for delta, cid in moved[:top]:
        source, path, _ = new.chunks.get(cid) or old.chunks[cid]
        movers.append(
            {
                "chunk_id": cid,
                "source": source,
                "path": path,
                "from": round(old.attention.get(cid, 0.0), 6),
                "to": round(new.attention.get(cid, 0.0), 6),
                "delta": round(delta, 6),
            }
        )
    return {"moved": len(moved), "top_movers": movers}


def what_changed(home: IndexHome, base: str | None, version: str, top: int = 5) -> dict[str, Any]:
    """What a publish tells its operator (the Dagster metadata of each publish step): the diff of a staged or
    published ``version`` against the version it was built on, as a one-line summary (``what_changed``) and the
    counts per source, registry, GBIM and the top attention movers (``changes``). Call it before publishing (the
    base may be pruned then). Never raises for a damaged or missing base: the summary says why nothing is compared."""
    if base is None:
        return {"what_changed": f"{version}: the first version (nothing to compare with)"}
    if not (home.version_dir(base) / "manifest.json").is_file():
        return {"what_changed": f"{version}: its base version {base} is no longer kept (nothing to compare with)"}
    try:
        diff = diff_versions(home, base, version, top=top, limit=0)
    except (LivingMemoryError, OSError, duckdb.Error) as exc:
        return {"what_changed": f"{version}: no diff against {base} ({exc})"}
    registry, gbim = diff["registry"], diff["gbim"]
    return {
        "what_changed": diff["summary"],
        "changes": {
            "sources": {n: {"files": s["files"], "chunks": s["chunks"]} for n, s in diff["sources"].items()},
            "registry": registry and {k: registry[k] for k in ("added", "removed", "changed")},
            "gbim": gbim
            and {
                "entities": {k: gbim["entities"][k] for k in ("added", "removed", "changed")},
                "relations": gbim["relations"],
            },
            "attention": diff["attention"],
        },
    }
