"""Chunk identity, seal detection and the living-memory chunk record.

Identity is content-addressed: ``chunk_id = uuid5(NAMESPACE, source, path, sha256(content), occurrence)``,
where ``occurrence`` counts earlier chunks with the same text in the same file. An unchanged chunk keeps its
id (and with it attention, seal and last_breath_seen) when other parts of its file, or other files, change.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

SEAL_MARKER = "∞Δ∞"
NAMESPACE = uuid.UUID("6f1c1b52-52a4-4c5e-9d0b-6c1f3b9f4a10")

# Columns of the ``chunks`` table, in order.
CHUNK_COLUMNS = (
    "chunk_id", "source", "collection", "access", "content", "content_hash", "embed_hash", "seal_state",
    "path", "commit_sha", "timestamp", "type", "size", "created_at", "updated_at", "heading_path", "chunk_index",
    "parent_id", "domain",
)  # fmt: skip


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def chunk_id(source: str, path: str, content_sha: str, occurrence: int) -> str:
    return str(uuid.uuid5(NAMESPACE, f"{source}\x1f{path}\x1f{content_sha}\x1f{occurrence}"))


def parent_id(source: str, path: str) -> str:
    """Id of the parent document (the whole file) of a source path."""
    return str(uuid.uuid5(NAMESPACE, f"parent\x1f{source}\x1f{path}"))


def is_sealed(text: str, sealed_by_config: bool) -> bool:
    """A file is authoritative when it carries the ``∞Δ∞`` marker or the sources file lists it as sealed."""
    return sealed_by_config or SEAL_MARKER in text


def embed_text(content: str, heading_path: list[str]) -> str:
    """The text that is embedded: the chunk, preceded by its enclosing headings when it is a sub-section.

    A chunk of ``### Eligibility`` under ``## SNAP`` is embedded as ``SNAP\\n### Eligibility ...`` so the vector
    knows what it is the eligibility of.
    """
    outer = heading_path[:-1]
    return f"{' > '.join(outer)}\n{content}" if outer else content


def row_to_record(row: dict[str, Any], attention: float = 0.0, last_breath_seen: str | None = None) -> dict:
    """A ``chunks`` table row (plus its attention) as a chunk record per ``schemas/chunk.schema.json``."""
    metadata: dict[str, Any] = {
        "type": row["type"],
        "size": row["size"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "collection": row["collection"],
        "access": row["access"],
        "heading_path": json.loads(row["heading_path"]),
        "chunk_index": row["chunk_index"],
        "parent_id": row["parent_id"],
        "content_hash": row["content_hash"],
    }
    metadata.update(json.loads(row["domain"]) if row["domain"] else {})
    return {
        "chunk_id": row["chunk_id"],
        "source": row["source"],
        "content": row["content"],
        "seal_state": row["seal_state"],
        "last_breath_seen": last_breath_seen,
        "attention_score": attention,
        "provenance": {"path": row["path"], "commit": row["commit_sha"], "timestamp": row["timestamp"]},
        "metadata": metadata,
    }
