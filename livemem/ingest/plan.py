"""What a build does to each file of a source: compared with the base version (the current one), which files are
carried over unchanged, which are rebuilt (new or changed), which are deleted; and whether there is anything to
build at all.

A file is carried when its blob and its provenance are the same as in the base and the source's configuration
(and the model) did not change; a document also needs the same extractor (``stale_formats``), and one the base
reported ``deferred`` (past that build's extraction budget) is always extracted again. With the base commit an ancestor of the head, only the paths the commits since the
base touched are looked at (``quick_plan``, O(change)); otherwise the whole tree is compared (``plan_source``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from livemem.duck import sql_literal, sql_literals
from livemem.ingest.chroma_mirror import vector_store_mode
from livemem.ingest.documents import document_format, extractors
from livemem.sources.config import SourceConfig, SourcesConfig
from livemem.sources.gitsource import GitSource, TreeEntry, name_problem
from livemem.version.schema import LAYOUT_VERSION
from livemem.version.store import IndexHome

QUICK_PLAN_MAX_PATHS = 2000  # more paths touched since the base: list the whole tree instead (one git call)
DEFERRED = "deferred"  # the skipped-file reason of a document past its build's extraction budget


@dataclass(frozen=True)
class Base:
    """The version a build starts from (the current one): its id, manifest and directory, all None on an empty
    index."""

    version: str | None = None
    manifest: dict[str, Any] | None = None
    dir: Path | None = None

    @classmethod
    def current(cls, home: IndexHome) -> Base:
        version = home.current()
        if not version:
            return cls()
        return cls(version, home.manifest(version), home.version_dir(version))

    @property
    def segmented(self) -> bool:
        """A base of this layout; one of an older layout has no segments to share: every file is rebuilt (vectors
        come from the cache)."""
        return bool(self.manifest and self.manifest.get("layout_version") == LAYOUT_VERSION)

    @property
    def sources(self) -> dict[str, Any]:
        """The base manifest's entry of each source."""
        return (self.manifest or {}).get("sources", {})


@dataclass
class FilePlan:
    """What happens to each file of one source in this build."""

    source: SourceConfig
    git: GitSource
    head: str
    fingerprint: str
    base_commit: str | None
    tree: dict[str, TreeEntry]
    carried: list[str]
    rebuilt: list[str]
    new: set[str]
    deleted: list[str]
    unchanged: int  # files of the base carried over (all of them, ``carried`` or not)
    base_created: dict[str, str | None] = field(default_factory=dict)
    # set when only the paths commits since the base touched were looked at: every other file of the source in the
    # base is carried (``carried`` then lists none of them)
    carry_all_but: list[str] | None = None

    @property
    def changed_paths(self) -> list[str]:
        return sorted(set(self.rebuilt) - self.new)


def source_fingerprint(config: SourcesConfig, src: SourceConfig, model_id: str) -> str:
    """What a source's chunks depend on beside its files: its settings, the chunking settings and the model."""
    return src.fingerprint({**config.chunking, "model": model_id})


def stale_formats(base_entry: dict[str, Any] | None) -> set[str]:
    """The document formats whose extractor (library, version, rules: ``documents.extractor_id``) is not the one the
    base source entry was built with: their files are extracted again, every other file is carried. A base that
    names no extractors (built before documents were extracted: they were skipped as binary) has all formats stale."""
    before = (base_entry or {}).get("extractors") or {}
    return {fmt for fmt, ident in extractors().items() if before.get(fmt) != ident}


def already_indexed(base: Base, config: SourcesConfig, model_id: str, heads: dict[str, str | None]) -> bool:
    """Whether the base indexes every source at ``heads`` (source → head commit) with this configuration and model:
    then there is nothing to build."""
    if base.manifest is None:
        return False
    manifest = base.manifest
    if manifest.get("model", {}).get("id") != model_id or set(manifest["sources"]) != set(heads):
        return False
    if manifest.get("layout_version") != LAYOUT_VERSION:
        return False  # built by an older layout (or damaged): rebuild it, carrying over what still holds
    if manifest.get("vector_store", "chroma") != vector_store_mode(config):
        return False  # the vector store was switched on or off: write (or drop) it
    for src in config.sources:
        entry = manifest["sources"][src.name]
        if entry["head_commit"] != heads[src.name]:
            return False
        if entry.get("config_fingerprint") != source_fingerprint(config, src, model_id):
            return False
        if stale_formats(entry):
            return False  # an extractor changed: its documents are extracted again
        if entry.get("skipped_files", {}).get(DEFERRED):
            return False  # documents past the last build's extraction budget wait for this one
    return True


def deferred_paths(con: duckdb.DuckDBPyConnection, base: Base, source: str) -> set[str]:
    """The paths of ``source`` the base reported ``deferred``: rebuilt whatever their blob."""
    if (
        base.dir is None
        or not base.segmented
        or not base.sources.get(source, {}).get("skipped_files", {}).get(DEFERRED)
    ):
        return set()
    rows = con.execute(
        "SELECT path FROM base.skipped_files WHERE source = ? AND reason = ?", [source, DEFERRED]
    ).fetchall()
    return {path for (path,) in rows}


def base_files(
    con: duckdb.DuckDBPyConnection, base: Base, source: str, only: list[str] | None = None
) -> dict[str, tuple[str, str]]:
    """path -> (blob sha, created_at) of the files the base version indexed or skipped for a source (of the
    paths in ``only`` when given)."""
    if base.dir is None or not base.segmented:
        return {}
    if only is None:
        where = f"source = {sql_literal(source)}"
    elif not only:
        return {}
    else:  # a literal list: Parquet row groups are pruned by their statistics
        where = f"source = {sql_literal(source)} AND path IN ({sql_literals(only)})"
    rows = con.execute(
        f"SELECT p.path, p.blob_sha, p.created_at FROM base.parent_parts p "
        f"ANTI JOIN base.parent_deletes x ON p._seg = x.segment AND p._row = x.seg_row WHERE {where} "
        f"UNION ALL SELECT path, blob_sha, NULL FROM base.skipped_files WHERE {where}"
    ).fetchall()
    return {p: (sha, created) for p, sha, created in rows}


def plan_source(
    con: duckdb.DuckDBPyConnection, base: Base, src: SourceConfig, repo: GitSource, head: str, fingerprint: str
) -> FilePlan:
    """The plan of one source at ``head`` (``fingerprint``: its configuration's, ``source_fingerprint``); the base version
    is attached to ``con`` as ``base``."""
    base_entry = base.sources.get(src.name)
    quick = quick_plan(con, base, src, repo, head, base_entry, fingerprint)
    if quick is not None:
        return quick
    tree = {e.path: e for e in repo.list_files(head) if src.selects(e.path)}
    before_files = base_files(con, base, src.name)
    same_config = base_entry is not None and base_entry.get("config_fingerprint") == fingerprint
    base_commit = base_entry.get("head_commit") if base_entry else None
    # A file whose blob is the same as in the base may still have been changed and changed back since: its
    # provenance (the last commit that changed it) moved, so it is rebuilt too. Without a usable range
    # (history rewritten, base commit gone) nothing can be carried.
    touched = repo.touched_since(base_commit, head) if before_files else set()
    stale = stale_formats(base_entry)
    deferred = deferred_paths(con, base, src.name)
    carried, rebuilt, new = [], [], set()
    for path, entry in tree.items():
        before = before_files.get(path)
        if before is None:
            new.add(path)
            rebuilt.append(path)
        elif (
            before[0] == entry.blob_sha
            and same_config
            and touched is not None
            and path not in touched
            and document_format(path) not in stale
            and path not in deferred
        ):
            carried.append(path)
        else:
            rebuilt.append(path)
    deleted = sorted(set(before_files) - set(tree))
    base_created: dict[str, str | None] = {p: created for p, (_, created) in before_files.items()}
    return FilePlan(
        src, repo, head, fingerprint, base_commit, tree, carried, rebuilt, new, deleted, len(carried), base_created
    )  # fmt: skip


def quick_plan(
    con: duckdb.DuckDBPyConnection,
    base: Base,
    src: SourceConfig,
    repo: GitSource,
    head: str,
    base_entry: dict[str, Any] | None,
    fingerprint: str,
) -> FilePlan | None:
    """The plan from the commits since the base alone, O(change): with the same configuration and the base
    commit an ancestor of ``head``, a file no commit since touched is unchanged (same blob, same provenance),
    so only the touched paths are looked up in the tree and in the base. None when that does not hold (or so
    many paths were touched that listing the whole tree is cheaper): ``plan_source`` compares everything."""
    if not (base.segmented and base_entry and base_entry.get("config_fingerprint") == fingerprint):
        return None
    if stale_formats(base_entry):
        return None  # an extractor changed: its documents are rebuilt wherever they are, compare the whole tree
    if base_entry.get("skipped_files", {}).get(DEFERRED):
        return None  # deferred documents are extracted again wherever they are
    base_commit = base_entry.get("head_commit")
    touched = repo.touched_since(base_commit, head)
    if touched is None or len(touched) > QUICK_PLAN_MAX_PATHS:
        return None
    if any(name_problem(p) for p in touched):
        return None  # a name git gives otherwise than the tree listing shows it: compare the whole tree
    paths = sorted(p for p in touched if src.selects(p))
    tree = {e.path: e for e in repo.entries(head, paths)} if paths else {}
    if any(e.problem for e in tree.values()):
        return None
    before_files = base_files(con, base, src.name, paths)
    if any(p not in tree and p not in before_files for p in paths):
        return None  # added and deleted since the base, or a crafted name the base shows otherwise: compare all
    new = {p for p in tree if p not in before_files}
    rebuilt = sorted(tree)
    deleted = sorted(set(before_files) - set(tree))
    base_count = base_entry.get("files", 0) + sum(base_entry.get("skipped_files", {}).values())
    base_created: dict[str, str | None] = {p: created for p, (_, created) in before_files.items()}
    return FilePlan(
        src, repo, head, fingerprint, base_commit, tree, [], rebuilt, new, deleted, base_count - len(before_files),
        base_created, carry_all_but=sorted(before_files),
    )  # fmt: skip
