"""Personal memory: the consolidated snapshots the daily asset writes and requests read (``CURRENT`` names one).

Part of ``livemem.personal`` (its package docstring says how personal memory works)."""

from __future__ import annotations

import json
import os
import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from livemem.personal.common import CURRENT, SNAPSHOTS


@dataclass
class MemorySnapshot:
    """One consolidated snapshot: items (cards and exchanges) with their vectors, and feedback votes."""

    snapshot_id: str
    through_id: int
    created_at: str
    model_id: str
    items: list[dict[str, Any]]
    vectors: np.ndarray
    feedback: list[dict[str, Any]]
    by_user: dict[str, list[int]] = field(default_factory=dict)  # user → rows of ``items`` (built on load)
    votes_by_user: dict[str, dict[str, int]] = field(default_factory=dict)  # user → chunk → net votes

    def __post_init__(self) -> None:
        for i, item in enumerate(self.items):
            self.by_user.setdefault(item["user"], []).append(i)
        for vote in self.feedback:
            self.votes_by_user.setdefault(vote["user"], {})[vote["chunk_id"]] = vote["votes"]


def current_snapshot_id(directory: Path) -> str | None:
    try:
        return (directory / CURRENT).read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None


def load_memory_snapshot(directory: Path, snapshot_id: str) -> MemorySnapshot:
    with np.load(directory / SNAPSHOTS / f"{snapshot_id}.npz", allow_pickle=False) as data:
        meta = json.loads(str(data["meta"]))
        vectors = np.asarray(data["vectors"], dtype=np.float32)
    return MemorySnapshot(
        snapshot_id, meta["through_id"], meta["created_at"], meta["model_id"], meta["items"], vectors,
        meta["feedback"],
    )  # fmt: skip


def write_snapshot(directory: Path, snapshot: MemorySnapshot) -> Path:
    """Write the snapshot file (temp + rename), then switch ``CURRENT`` (temp + rename), then delete the older
    snapshots: they may hold memory that was deleted since."""
    folder = directory / SNAPSHOTS
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    meta = {
        "through_id": snapshot.through_id,
        "created_at": snapshot.created_at,
        "model_id": snapshot.model_id,
        "items": snapshot.items,
        "feedback": snapshot.feedback,
    }
    target = folder / f"{snapshot.snapshot_id}.npz"
    tmp = folder / f".{snapshot.snapshot_id}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        np.savez(out, vectors=snapshot.vectors, meta=np.array(json.dumps(meta, ensure_ascii=False)))
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, target)
    pointer = directory / f".{CURRENT}.{secrets.token_hex(4)}.tmp"
    pointer.write_text(snapshot.snapshot_id + "\n", encoding="utf-8")
    os.replace(pointer, directory / CURRENT)
    for old in [*folder.glob("*.npz"), *folder.glob(".*.tmp")]:  # consolidations are serialised: all stale
        if old != target:
            old.unlink(missing_ok=True)
    return target


_SNAPSHOTS: dict[str, MemorySnapshot] = {}
_SNAPSHOTS_LOCK = threading.Lock()


def cached_snapshot(directory: Path) -> MemorySnapshot | None:
    """The current snapshot, loaded once per process per snapshot id."""
    key = str(directory)
    for attempt in range(3):
        snapshot_id = current_snapshot_id(directory)
        if snapshot_id is None:
            return None
        found = _SNAPSHOTS.get(key)
        if found is not None and found.snapshot_id == snapshot_id:
            return found
        try:
            found = load_memory_snapshot(directory, snapshot_id)
        except FileNotFoundError:  # a consolidation switched CURRENT and removed this one since: read it again
            if attempt == 2:
                raise
            continue
        with _SNAPSHOTS_LOCK:
            _SNAPSHOTS[key] = found
        return found
    return None
