"""Proof that a published index is exactly its sources at their commits.

Two tools, both reporting per source and file:

- ``compare_versions(published, reference)``: every part the chunk step owns, compared between two version
  directories: chunk rows (ids, content, heading paths, provenance, seal state, metadata), parents, skipped files,
  the retrieval snapshot (ids, vectors, sparse index files) and the vector store (ids, documents, metadata,
  vectors per collection), plus the manifest's per-source counts. Usage state (attention, lineage) is not
  compared: it is carried by design, not derived from the sources.
- ``rebuild_and_compare(config, home, embedder)``: rebuilds the commits the current version indexed from scratch
  into a temporary home that shares the live embedding cache (so it costs no model time for text embedded before)
  and compares. ``livemem verify --rebuild`` and the ``published_index_matches_rebuild`` asset check call it.

The randomized differential test (``tests/pipelines/test_differential.py``, ``bench/differential.py``) compares every
incremental build with a from-scratch build of the same commits through ``compare_versions``.
"""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from livemem.errors import LivingMemoryError, SourceError
from livemem.index import records
from livemem.ingest.build import build_version
from livemem.ingest.layout import SKIP_COLUMNS
from livemem.model.embedding import Embedder
from livemem.settings import EngineConfig
from livemem.sources.config import SourcesConfig
from livemem.sources.gitsource import GitSource
from livemem.version import connect
from livemem.version.segments import PARENT_COLUMNS
from livemem.version.store import CHROMA, IndexHome

MAX_LISTED = 50
VECTOR_TOLERANCE = 1e-6
MANIFEST_SOURCE_KEYS = ("head_commit", "collection", "access", "files", "chunks", "sealed_chunks", "skipped_files")


@dataclass
class Comparison:
    """Differences between a version and its reference, keyed by (source, path) where they have one."""

    differences: dict[tuple[str, str], list[str]] = field(default_factory=lambda: defaultdict(list))
    general: list[str] = field(default_factory=list)
    files_compared: int = 0
    chunks_compared: int = 0
    unrebuildable: list[str] = field(default_factory=list)  # why the version cannot be rebuilt (nothing compared)

    @property
    def equal(self) -> bool:
        return not self.differences and not self.general and not self.unrebuildable

    def add(self, source: str, path: str, what: str) -> None:
        self.differences[(source, path)].append(what)

    def lines(self, limit: int = MAX_LISTED) -> list[str]:
        """One line per differing file (then the general differences), at most ``limit``."""
        out = [f"{source}: {path}: {'; '.join(dict.fromkeys(whats))}" for (source, path), whats in sorted(
            self.differences.items())]  # fmt: skip
        out += self.general
        out = self.unrebuildable + out
        return out[:limit] + ([f"... and {len(out) - limit} more"] if len(out) > limit else [])

    def by_source(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for source, _ in self.differences:
            counts[source] += 1
        return dict(counts)

    def summary(self) -> str:
        if self.unrebuildable:
            return f"cannot be rebuilt from its sources: {len(self.unrebuildable)} source(s) lost the indexed commit"
        if self.equal:
            return f"identical: {self.files_compared} files, {self.chunks_compared} chunks"
        per_source = ", ".join(f"{s}: {n} file(s)" for s, n in sorted(self.by_source().items()))
        return (
            f"{len(self.differences)} file(s) differ ({per_source or 'none'}); {len(self.general)} other difference(s)"
        )


def compare_versions(
    published: Path,
    reference: Path,
    chroma_server: tuple[str, int] | None = None,
    engine: EngineConfig | None = None,
) -> Comparison:
    """Compare the chunk-owned parts of two version directories (``reference`` is the from-scratch build;
    ``chroma_server``: the Chroma server the configuration names, where versions may keep their vectors; ``engine``:
    how they are loaded, the home's ``IndexHome.engine``)."""
    result = Comparison()
    _compare_tables(published, reference, result)
    _compare_retrieval(published, reference, result, engine)
    _compare_vectors(published, reference, result, chroma_server)
    _compare_manifests(published, reference, result)
    return result


# --- tables -------------------------------------------------------------------------------------------------
def _rows(version: Path, sql: str) -> list[tuple]:
    con = connect(version)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _compare_tables(published: Path, reference: Path, result: Comparison) -> None:
    cols = records.CHUNK_COLUMNS
    sql = f"SELECT {', '.join(cols)} FROM chunks ORDER BY chunk_id"
    got = {r[0]: dict(zip(cols, r, strict=True)) for r in _rows(published, sql)}
    want = {r[0]: dict(zip(cols, r, strict=True)) for r in _rows(reference, sql)}
    result.chunks_compared = len(want)
    for cid in want.keys() - got.keys():
        w = want[cid]
        result.add(w["source"], w["path"], f"chunk {cid} (#{w['chunk_index']}) missing")
    for cid in got.keys() - want.keys():
        g = got[cid]
        result.add(g["source"], g["path"], f"chunk {cid} (#{g['chunk_index']}) should not exist")
    for cid in want.keys() & got.keys():
        g, w = got[cid], want[cid]
        differing = [c for c in cols if g[c] != w[c]]
        if differing:
            detail = ", ".join(f"{c} {g[c]!r:.60} != {w[c]!r:.60}" for c in differing[:3])
            result.add(w["source"], w["path"], f"chunk {cid}: {detail}")

    psql = f"SELECT {', '.join(PARENT_COLUMNS)} FROM parents"
    got_p = {(r[1], r[4]): r for r in _rows(published, psql)}
    want_p = {(r[1], r[4]): r for r in _rows(reference, psql)}
    result.files_compared = len(want_p)
    for key in want_p.keys() - got_p.keys():
        result.add(*key, "file missing (no parent row)")
    for key in got_p.keys() - want_p.keys():
        result.add(*key, "file should not be indexed (extra parent row)")
    for key in want_p.keys() & got_p.keys():
        differing = [c for c, a, b in zip(PARENT_COLUMNS, got_p[key], want_p[key], strict=True) if a != b]
        if differing:
            result.add(*key, f"parent differs in {', '.join(differing)}")

    ssql = f"SELECT {', '.join(SKIP_COLUMNS)} FROM skipped_files"
    got_s = {(r[0], r[1]): r for r in _rows(published, ssql)}
    want_s = {(r[0], r[1]): r for r in _rows(reference, ssql)}
    for key in want_s.keys() - got_s.keys():
        result.add(*key, f"skip ({want_s[key][4]}) not recorded")
    for key in got_s.keys() - want_s.keys():
        result.add(*key, f"recorded as skipped ({got_s[key][4]}) but should not be")
    for key in want_s.keys() & got_s.keys():
        if got_s[key] != want_s[key]:
            result.add(*key, f"skip record differs: {got_s[key]} != {want_s[key]}")


# --- retrieval snapshot -------------------------------------------------------------------------------------
def _compare_retrieval(published: Path, reference: Path, result: Comparison, engine: EngineConfig | None) -> None:
    """What serving answers from, compared logically (segments may be laid out differently): the same chunk ids,
    the same vector per id, and the same BM25 score per id for sample queries under every access-level scope
    (the term statistics of a version equal those of a from-scratch build)."""
    from livemem.engine.snapshot import IndexUnavailable, load_snapshot_at

    try:
        got, want = load_snapshot_at(published, engine=engine), load_snapshot_at(reference, engine=engine)
    except IndexUnavailable as exc:
        result.general.append(f"retrieval data unreadable: {exc}")
        return
    try:
        if set(got.ids) != set(want.ids) or len(got.ids) != len(want.ids):
            missing, extra = set(want.ids) - set(got.ids), set(got.ids) - set(want.ids)
            result.general.append(f"retrieval ids differ: {len(missing)} missing, {len(extra)} extra")
            return
        if not want.ids:
            return
        order = np.array([got.row_of[c] for c in want.ids])
        got_dense, want_dense = got.dense.materialize()[order], want.dense.materialize()
        off = np.abs(got_dense - want_dense).max(axis=1) > VECTOR_TOLERANCE
        for i in np.flatnonzero(off)[:MAX_LISTED]:
            result.general.append(f"retrieval vector of chunk {want.ids[i]} differs")
        _compare_sentences(got, want, order, result)
        scopes = {frozenset([level]) for level in want.access_levels} | {want.access_levels}
        for query in _sample_queries(want):
            for scope in sorted(scopes, key=sorted):
                a, b = got.sparse_for(scope), want.sparse_for(scope)
                if a is None or b is None:
                    continue
                sa, sb = a.scores(query)[order], b.scores(query)
                if not np.allclose(sa, sb, rtol=1e-5, atol=1e-6):
                    worst = int(np.argmax(np.abs(sa - sb)))
                    result.general.append(
                        f"BM25 score of chunk {want.ids[worst]} for {query!r} over {sorted(scope)} differs: "
                        f"{sa[worst]:.6f} != {sb[worst]:.6f}"
                    )
                    return
    finally:
        got.close()
        want.close()


def _compare_sentences(got, want, order: np.ndarray, result: Comparison) -> None:
    """The same sentence vectors (``livemem.index.sentences``) for every chunk id, in the same order."""
    if not got.dense.has_sentences and not want.dense.has_sentences:
        return
    listed = 0
    for i, row in enumerate(order.tolist()):
        a, b = got.dense.sentence_vectors(row), want.dense.sentence_vectors(i)
        if a.shape != b.shape or (a.size and np.abs(a - b).max() > VECTOR_TOLERANCE):
            result.general.append(
                f"sentence vectors of chunk {want.ids[i]} differ ({a.shape[0]} sentences, expected {b.shape[0]})"
            )
            listed += 1
            if listed >= MAX_LISTED:
                return


def _sample_queries(snap, count: int = 24) -> list[str]:
    """Words of chunks spread over the version (deterministic), one and two at a time."""
    from livemem.index.postings import tokens

    words: list[str] = []
    step = max(1, snap.size // count)
    for row in range(0, snap.size, step):
        found = [w for w in snap.rows[row]["content"].split() if tokens(w)]
        if found:
            words.append(found[len(found) // 2])
    return words + [f"{a} {b}" for a, b in itertools.pairwise(words)][: count // 2]


# --- vector store -------------------------------------------------------------------------------------------
def read_collections(
    version: Path, names: list[str], address: tuple[str, int] | None = None
) -> dict[str, dict[str, tuple]]:
    """id -> (document, metadata, vector) for each named collection of a version's vector store (``address``: the
    Chroma server the configuration names, for a version that keeps its vectors there).

    A persistent Chroma directory is read from a private copy: opening it in place could write to a published
    version.
    """
    from livemem.version.vectors import SERVER_FILE, _http_client

    out: dict[str, dict[str, tuple]] = {}
    mapping_file = version / CHROMA / SERVER_FILE
    if mapping_file.is_file():
        if address is None:
            raise LivingMemoryError(
                f"{version.name} keeps its vectors on a Chroma server; set CHROMA_HOST to read them"
            )
        mapping = json.loads(mapping_file.read_text(encoding="utf-8"))["collections"]
        client = _http_client(address)
        for name in names:
            out[name] = _read_collection(client.get_collection(mapping[name])) if name in mapping else {}
        return out
    from livemem.version.vectors import close_chroma, open_chroma

    with tempfile.TemporaryDirectory(prefix="livemem-verify-") as tmp:
        copy = Path(tmp) / CHROMA
        if (version / CHROMA).is_dir():
            shutil.copytree(version / CHROMA, copy)
        client = open_chroma(copy)
        try:
            existing = {c.name for c in client.list_collections()}
            for name in names:
                out[name] = _read_collection(client.get_collection(name)) if name in existing else {}
        finally:
            close_chroma(client)
    return out


def _read_collection(collection: Any) -> dict[str, tuple]:
    rows: dict[str, tuple] = {}
    total, page = collection.count(), 2000
    for offset in range(0, total, page):
        got = collection.get(include=["documents", "metadatas", "embeddings"], limit=page, offset=offset)
        for cid, doc, meta, vec in zip(got["ids"], got["documents"], got["metadatas"], got["embeddings"], strict=True):
            rows[cid] = (doc, meta, np.asarray(vec, dtype=np.float32))
    return rows


def _compare_vectors(
    published: Path, reference: Path, result: Comparison, server: tuple[str, int] | None = None
) -> None:
    present = [(published / CHROMA).is_dir(), (reference / CHROMA).is_dir()]
    if not any(present):
        return  # no vector store configured: the retrieval snapshot (compared above) holds the vectors
    if not all(present):
        result.general.append("a vector store exists in only one of the versions")
        return
    names = sorted(
        {c for (c,) in _rows(published, "SELECT DISTINCT collection FROM chunks")}
        | {c for (c,) in _rows(reference, "SELECT DISTINCT collection FROM chunks")}
    )
    where = {r[0]: (r[1], r[2]) for r in _rows(reference, "SELECT chunk_id, source, path FROM chunks")}
    where.update({r[0]: (r[1], r[2]) for r in _rows(published, "SELECT chunk_id, source, path FROM chunks")})
    got, want = read_collections(published, names, server), read_collections(reference, names, server)

    def locate(cid: str, meta: dict | None) -> tuple[str, str]:
        if cid in where:
            return where[cid]
        return ((meta or {}).get("source", "?"), (meta or {}).get("path", "?"))

    for name in names:
        g, w = got[name], want[name]
        for cid in w.keys() - g.keys():
            result.add(*locate(cid, w[cid][1]), f"vector store: chunk {cid} missing from collection {name}")
        for cid in g.keys() - w.keys():
            result.add(*locate(cid, g[cid][1]), f"vector store: chunk {cid} should not be in collection {name}")
        for cid in w.keys() & g.keys():
            (gdoc, gmeta, gvec), (wdoc, wmeta, wvec) = g[cid], w[cid]
            if gdoc != wdoc:
                result.add(*locate(cid, wmeta), f"vector store: document of {cid} differs")
            if gmeta != wmeta:
                keys = sorted(k for k in {*gmeta, *wmeta} if gmeta.get(k) != wmeta.get(k))
                result.add(*locate(cid, wmeta), f"vector store: metadata of {cid} differs in {', '.join(keys)}")
            if gvec.shape != wvec.shape or np.abs(gvec - wvec).max() > VECTOR_TOLERANCE:
                result.add(*locate(cid, wmeta), f"vector store: vector of {cid} differs")


# --- manifest -----------------------------------------------------------------------------------------------
def _compare_manifests(published: Path, reference: Path, result: Comparison) -> None:
    got = json.loads((published / "manifest.json").read_text(encoding="utf-8"))
    want = json.loads((reference / "manifest.json").read_text(encoding="utf-8"))
    for key in ("total_chunks", "total_parents", "sealed_chunks"):
        if got.get(key) != want.get(key):
            result.general.append(f"manifest {key}: {got.get(key)} != {want.get(key)}")
    got_collections = {c: v for c, v in got.get("collections", {}).items() if c in want.get("collections", {})}
    if got_collections != want.get("collections", {}):
        result.general.append(f"manifest collections: {got.get('collections')} != {want.get('collections')}")
    for name, entry in want.get("sources", {}).items():
        mine = got.get("sources", {}).get(name)
        if mine is None:
            result.general.append(f"manifest: source {name} missing")
            continue
        for key in MANIFEST_SOURCE_KEYS:
            if mine.get(key) != entry.get(key):
                result.general.append(f"manifest: source {name} {key}: {mine.get(key)} != {entry.get(key)}")


# --- rebuild ------------------------------------------------------------------------------------------------
@dataclass
class RebuildReport:
    version_id: str
    comparison: Comparison
    notes: list[str]
    timings: dict[str, float]

    @property
    def equal(self) -> bool:
        return self.comparison.equal


def rebuild_and_compare(
    config: SourcesConfig, home: IndexHome, embedder: Embedder, version_id: str | None = None
) -> RebuildReport:
    """Rebuild the commits a published version (default: the current one) indexed, from scratch, and compare.

    Holds the home's write lock for the duration (the rebuild shares the live embedding cache, a DuckDB file with
    one writer), so it waits for a build in progress and a build waits for it.
    """
    version = version_id or home.current()
    if version is None:
        raise LivingMemoryError(f"no index published under {home.root} yet")
    manifest = home.manifest(version)
    commits = {name: entry["head_commit"] for name, entry in manifest["sources"].items()}
    notes = []
    configured = set(config.names)
    for name in sorted(configured ^ set(commits)):
        where = "the sources file" if name in configured else f"version {version}"
        notes.append(f"source {name} is only in {where}")
    gone = _lost_commits(config, manifest, version)
    if gone:  # rebuilding without them would list every file of theirs as a difference
        return RebuildReport(version, Comparison(unrebuildable=gone), notes, {})
    with tempfile.TemporaryDirectory(prefix="livemem-rebuild-", dir=home.root) as tmp, home.write_lock():
        scratch = IndexHome(Path(tmp) / "home", cache_dir=home.cache_dir, engine=home.engine)
        scratch.chroma_server = config.chroma_server  # its build wrote there: its collections are deleted there
        built = build_version(config, scratch, embedder, force=True, commits=commits)
        if built.version_id is None:
            raise LivingMemoryError(f"rebuild of {version} staged nothing: {built.reason}")
        reference = scratch.staged_dir(built.version_id)
        fresh = json.loads((reference / "manifest.json").read_text(encoding="utf-8"))
        was, now = (m.get("model", {}).get("id") for m in (manifest, fresh))
        if was != now:
            notes.append(
                f"{version} was embedded with {was!r}, the rebuild with {now!r} "
                "(index.precision, LIVEMEM_INDEX_PRECISION, index.encoder or LIVEMEM_ENCODER differ)"
            )
        for name, entry in fresh["sources"].items():
            mine = manifest["sources"].get(name, {})
            if mine and mine.get("config_fingerprint") != entry.get("config_fingerprint"):
                notes.append(
                    f"source {name}: the sources file changed since {version} was built "
                    "(the rebuild uses the file as it is now)"
                )
            if mine and mine.get("extractors") != entry.get("extractors"):
                notes.append(
                    f"source {name}: {version} read its documents with {mine.get('extractors')}, the rebuild with "
                    f"{entry.get('extractors')} (an extractor was upgraded: the next build extracts them again)"
                )
        try:
            comparison = compare_versions(home.version_dir(version), reference, config.chroma_server, home.engine)
        finally:
            shutil.rmtree(scratch.staging, ignore_errors=True)
            scratch._gc_vectors()  # a Chroma server keeps collections until no version of the home names them
    return RebuildReport(version, comparison, notes, built.timings)


def _lost_commits(config: SourcesConfig, manifest: dict[str, Any], version: str) -> list[str]:
    """One line per configured source whose indexed commit its repository no longer holds (history rewritten and
    the commit garbage-collected, or the repository gone)."""
    lost = []
    for name, entry in sorted(manifest["sources"].items()):
        if name not in config.names:
            continue
        repo, commit = config.source(name).repo, entry["head_commit"]
        try:
            with GitSource(repo, name) as git:
                present = git.has_commit(commit)
        except SourceError as exc:
            lost.append(f"source {name}: the commit {version} indexed ({commit[:12]}) cannot be read: {exc}")
            continue
        if not present:
            lost.append(
                f"source {name}: commit {commit[:12]}, which {version} indexed, is no longer in repository {repo} "
                "(history rewritten and the commit garbage-collected); the version cannot be rebuilt from its "
                "sources: build a new one from the current commits (`livemem materialize`)"
            )
    return lost


def table_fingerprints(version: Path) -> dict[str, tuple[int, str]]:
    """(row count, digest of the sorted rows) of every table of a version, to prove two versions hold the same
    data whatever step wrote them (a step re-run on unchanged input must give identical tables)."""
    con = connect(version)
    try:
        tables = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY 1").fetchall()]
        tables += [
            v
            for (v,) in con.execute(
                "SELECT view_name FROM duckdb_views() WHERE view_name IN ('chunks', 'parents')"
            ).fetchall()
        ]
        out = {}
        for table in tables:
            count, digest = cast(
                tuple[int, str],
                con.execute(
                    f"SELECT COUNT(*), COALESCE(md5(string_agg(r, chr(30) ORDER BY r)), '') "
                    f'FROM (SELECT CAST(t AS VARCHAR) AS r FROM "{table}" t)'
                ).fetchone(),
            )
            out[table] = (count, digest)
        return out
    finally:
        con.close()
