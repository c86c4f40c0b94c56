"""Personal memory: the daily consolidation (tombstones applied, expired rows dropped, duplicates merged, embedded).

Part of ``livemem.personal`` (its package docstring says how personal memory works)."""

from __future__ import annotations

import fcntl
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from livemem.dates import utc_now
from livemem.personal.common import DEFAULT_RETENTION_DAYS, event_iso, item_hash, normalized_text
from livemem.personal.log import log_for
from livemem.personal.snapshots import MemorySnapshot, cached_snapshot, write_snapshot
from livemem.personal.view import item_text


@dataclass
class Consolidation:
    snapshot_id: str
    through_id: int
    users: int
    items: int
    embedded: int
    reused_vectors: int
    feedback: int
    purged: dict[str, int]
    timings_s: dict[str, float]


def consolidate(
    directory: str | os.PathLike[str],
    encode: Callable[[list[str]], np.ndarray],
    model_id: str,
    retention_days: int = DEFAULT_RETENTION_DAYS,
    now: datetime | None = None,
    dsn: str | None = None,
) -> Consolidation:
    """Every log row so far → one new snapshot; then the rows that tombstones cover, expired rows, duplicates and
    applied tombstones are purged from the log. Vectors of texts the previous snapshot has (same model) are reused;
    the others are embedded with ``encode``. Running it again with no new rows gives the same items."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(directory / ".consolidate.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one at a time: each deletes every snapshot but its own
        return _consolidate(directory, encode, model_id, retention_days, now or utc_now(), dsn)


def _consolidate(
    directory: Path,
    encode: Callable[[list[str]], np.ndarray],
    model_id: str,
    retention_days: int,
    now: datetime,
    dsn: str | None,
) -> Consolidation:
    started = time.perf_counter()
    log = log_for(directory, dsn)
    cutoff = event_iso(now - timedelta(days=retention_days))
    through = log.max_id()
    rows = log.rows(through=through)
    purge, items, feedback_rows = _replay(rows, cutoff)
    ordered, todo, vectors, embed_s = _item_vectors(directory, encode, model_id, items)
    feedback = _feedback_votes(feedback_rows)
    snapshot = MemorySnapshot(
        f"{now:%Y-%m-%d}-{through:08d}-{secrets.token_hex(3)}", through, event_iso(now), model_id, ordered, vectors,
        feedback,
    )  # fmt: skip
    write_snapshot(directory, snapshot)
    purged = {name: log.purge(ids) for name, ids in purge.items()}
    return Consolidation(
        snapshot.snapshot_id, through, len({i["user"] for i in ordered} | {f["user"] for f in feedback}),
        len(ordered), len(todo), len(ordered) - len(todo), len(feedback), purged,
        {"embed": round(embed_s, 3), "total": round(time.perf_counter() - started, 3)},
    )  # fmt: skip


def _replay(
    rows: list[dict[str, Any]], cutoff: str
) -> tuple[dict[str, set[int]], dict[tuple[str, str], dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """The log replayed in order: the ids to purge (per reason), the items that stay (by user and item id) and each
    user's feedback rows; deletions, expiry (before ``cutoff``) and duplicate texts applied."""
    purge: dict[str, set[int]] = {"deleted": set(), "expired": set(), "duplicates": set(), "tombstones": set()}
    items: dict[tuple[str, str], dict[str, Any]] = {}
    seen_text: dict[tuple[str, str, str], str] = {}
    feedback_rows: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        user = row["user"]
        if row["kind"] == "delete":
            purge["tombstones"].add(row["id"])
            covered = [k for k in items if k[0] == user and (row["item_id"] is None or k[1] == row["item_id"])]
            for k in covered:
                purge["deleted"].add(items.pop(k)["log_id"])
            seen_text = {k: v for k, v in seen_text.items() if (k[0], v) in items}
            if row["item_id"] is None:
                purge["deleted"].update(r["id"] for r in feedback_rows.pop(user, []))
        elif row["created_at"] < cutoff:
            purge["expired"].add(row["id"])
        elif row["kind"] == "feedback":
            feedback_rows.setdefault(user, []).append(row)
        else:
            text = item_text(row["kind"], row["body"])
            same = (user, row["kind"], normalized_text(text))
            if same in seen_text:
                purge["duplicates"].add(row["id"])
                continue
            seen_text[same] = row["item_id"]
            items[(user, row["item_id"])] = {
                "user": user, "kind": row["kind"], "item_id": row["item_id"], "created_at": row["created_at"],
                "text": text, "log_id": row["id"],
            }  # fmt: skip
    return purge, items, feedback_rows


def _item_vectors(
    directory: Path,
    encode: Callable[[list[str]], np.ndarray],
    model_id: str,
    items: dict[tuple[str, str], dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[str], np.ndarray, float]:
    """The items in log order, the texts that needed encoding (the previous snapshot's vectors are reused for the
    same model), the items' vectors and the seconds spent encoding."""
    previous = cached_snapshot(directory)
    known: dict[str, np.ndarray] = {}
    if previous is not None and previous.model_id == model_id:
        known = {item_hash(i["text"]): previous.vectors[n] for n, i in enumerate(previous.items)}
    ordered = sorted(items.values(), key=lambda i: i["log_id"])
    todo = [i["text"] for i in ordered if item_hash(i["text"]) not in known]
    t = time.perf_counter()
    fresh = encode(todo) if todo else np.zeros((0, 0), dtype=np.float32)
    known.update(zip((item_hash(x) for x in todo), fresh, strict=True))
    embed_s = time.perf_counter() - t
    dim = next(iter(known.values())).shape[0] if known else 0
    vectors = (
        np.stack([known[item_hash(i["text"])] for i in ordered]).astype(np.float32)
        if ordered
        else np.zeros((0, dim), dtype=np.float32)
    )
    return ordered, todo, vectors, embed_s


def _feedback_votes(feedback_rows: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each user's net votes per chunk (useful +1, not useful -1), zero totals left out, by user then chunk."""
    feedback: list[dict[str, Any]] = []
    for user, judged in sorted(feedback_rows.items()):
        totals: dict[str, int] = {}
        for row in judged:
            totals[row["item_id"]] = totals.get(row["item_id"], 0) + (1 if row["body"]["useful"] else -1)
        feedback.extend({"user": user, "chunk_id": c, "votes": v} for c, v in sorted(totals.items()) if v)
    return feedback
