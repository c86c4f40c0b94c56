"""The Chroma mirror of a version's vectors (when the sources file asks for one): started from the base version's
store, rebuilt chunks upserted and gone ones deleted; rebuilt from scratch (vectors from the cache) when the base
has none or another model. ``vector_store_mode`` names the mode a manifest records."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from livemem.index import records
from livemem.model.embed_cache import EmbeddingCache
from livemem.model.embedding import Embedder
from livemem.sources.config import SourcesConfig
from livemem.version.vectors import delete, open_vectors, upsert

log = logging.getLogger(__name__)


def update_chroma(
    con: duckdb.DuckDBPyConnection,
    staged: Path,
    rows: list[dict[str, Any]],
    vectors: np.ndarray,
    *,
    embedder: Embedder,
    cache_dir: Path,
    base_dir: Path | None,
    base_manifest: dict[str, Any] | None,
    server: tuple[str, int] | None = None,
) -> None:
    """Start from the base version's vector store, then upsert rebuilt chunks and delete the gone ones; ``server``:
    the Chroma server the configuration names (``SourcesConfig.chroma_server``), else a directory in the version."""
    same_model = (base_manifest or {}).get("model", {}).get("id") == embedder.model_id
    client = open_vectors(staged, base_dir if same_model else None, server)
    if client.carried:
        gone = con.execute(
            "SELECT b.collection, b.chunk_id FROM base.chunks b LEFT JOIN chunks n "
            "ON n.chunk_id = b.chunk_id AND n.collection = b.collection WHERE n.chunk_id IS NULL"
        ).fetchall()
        carried_all = False
    else:
        gone = []
        carried_all = True
    try:
        wanted = {c for (c,) in con.execute("SELECT DISTINCT collection FROM chunks").fetchall()}
        existing = {c.name for c in client.list_collections()}
        chunk_collections = set((base_manifest or {}).get("collections", {}))
        for name in (existing & chunk_collections) - wanted:  # other steps' collections are theirs
            client.delete_collection(name)
        by_collection: dict[str, list[str]] = {}
        for collection, cid in gone:
            if collection in wanted:
                by_collection.setdefault(collection, []).append(cid)
        for collection, ids in by_collection.items():
            delete(client.get_collection(collection), ids)
        if carried_all:
            rows, vectors = all_rows_with_vectors(con, rows, vectors, embedder, cache_dir)
        groups: dict[str, list[int]] = {}
        for i, row in enumerate(rows):
            groups.setdefault(row["collection"], []).append(i)
        for collection in wanted:
            col = client.get_or_create_collection(
                collection, metadata={"hnsw:space": "cosine"}, embedding_function=None
            )
            idx = groups.get(collection, [])
            upsert(
                col,
                ids=[rows[j]["chunk_id"] for j in idx],
                vectors=vectors[idx],
                documents=[rows[j]["content"] for j in idx],
                metadatas=[chroma_metadata(rows[j]) for j in idx],
            )
    finally:
        client.close()


def flushed_rows(
    con: duckdb.DuckDBPyConnection, parts: Path, segments: list[str]
) -> tuple[list[dict[str, Any]], np.ndarray]:
    """The chunk rows and vectors of the segments a build wrote (``SegmentFlusher.written``), read back from them:
    the mirror's upserts (the build itself holds one segment's rows at a time; the mirror needs them all)."""
    rows: list[dict[str, Any]] = []
    vectors: list[np.ndarray] = []
    for segment in segments:
        path = str(parts / segment / "chunks.parquet").replace("'", "''")
        frame = con.execute(f"SELECT {', '.join(records.CHUNK_COLUMNS)} FROM read_parquet('{path}') ORDER BY _row").df()
        rows += frame.astype(object).where(frame.notna(), None).to_dict("records")
        vectors.append(np.load(parts / segment / "dense.npy"))
    return rows, (np.concatenate(vectors) if vectors else np.zeros((0, 0), dtype=np.float32))


def all_rows_with_vectors(
    con: duckdb.DuckDBPyConnection, rows: list[dict[str, Any]], vectors: np.ndarray, embedder: Embedder, cache_dir: Path
) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Every chunk of the version with its vector (vector store rebuilt from scratch, via the cache)."""
    fresh = {r["chunk_id"] for r in rows}
    carried = [
        dict(zip(records.CHUNK_COLUMNS, r, strict=True))
        for r in con.execute(f"SELECT {', '.join(records.CHUNK_COLUMNS)} FROM chunks").fetchall()
        if r[0] not in fresh
    ]
    if not carried:
        return rows, vectors
    extra = vectors_for([(r["content"], r["heading_path"], r["embed_hash"]) for r in carried], embedder, cache_dir)
    return rows + carried, (np.concatenate([vectors, extra]) if len(rows) else extra)


def vectors_for(items: list[tuple[str, str, str]], embedder: Embedder, cache_dir: Path) -> np.ndarray:
    """Vectors of (content, heading path JSON, embed hash) items: from the cache, computing any missing."""
    with EmbeddingCache(cache_dir, embedder.dim) as cache:
        found = cache.get_many([h for _, _, h in items])
        missing = {h: records.embed_text(c, json.loads(p)) for c, p, h in items if h not in found}
        if missing:
            log.warning("embedding cache lacks %d vectors of carried-over chunks; recomputing", len(missing))
            computed = dict(zip(missing, embedder.encode(list(missing.values())), strict=True))
            cache.put_many(computed)
            found.update(computed)
    if not items:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    return np.stack([found[h] for _, _, h in items])


def vector_store_mode(config: SourcesConfig) -> str:
    """``none`` (vectors only in the retrieval snapshot), ``chroma`` (a persistent Chroma store in the version) or
    ``chroma-server`` (collections on the Chroma server named by ``CHROMA_HOST``)."""
    if not config.uses_chroma:
        return "none"
    return "chroma-server" if config.chroma_server else "chroma"


def chroma_metadata(row: dict[str, Any]) -> dict[str, Any]:
    """The scalar metadata stored beside a vector (Chroma accepts str, int, float and bool, not None)."""
    meta: dict[str, Any] = {
        "source": row["source"],
        "collection": row["collection"],
        "access": row["access"],
        "path": row["path"],
        "seal_state": row["seal_state"],
        "type": row["type"],
        "parent_id": row["parent_id"],
        "commit": row["commit_sha"],
        "updated_at": row["updated_at"],
        "created_at": row["created_at"],
        "chunk_index": row["chunk_index"],
        "heading": " > ".join(json.loads(row["heading_path"])),
    }
    if row.get("domain"):
        meta.update({k: v for k, v in json.loads(row["domain"]).items() if v is not None})
    return meta
