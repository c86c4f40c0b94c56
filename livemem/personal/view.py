"""Personal memory: what one request sees (``PersonalView``: the user's snapshot part plus newer log rows).

Part of ``livemem.personal`` (its package docstring says how personal memory works)."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast

import numpy as np
from cachetools import LRUCache

from livemem.dates import utc_now
from livemem.personal.common import (
    DEFAULT_RETENTION_DAYS,
    EXCHANGE_ANSWER_CHARS,
    NUDGE_POOL,
    event_iso,
    nudge_factor,
)
from livemem.personal.log import log_for
from livemem.personal.snapshots import cached_snapshot, current_snapshot_id

_VECTORS: LRUCache = LRUCache(maxsize=4096)  # pending items' vectors, by (model id, text hash)
_VECTORS_LOCK = threading.Lock()


def item_text(kind: str, body: dict[str, Any]) -> str:
    """What is embedded and shown: a card's text; an exchange's question (and the start of its answer)."""
    if kind == "card":
        return body["text"]
    answer = body.get("answer")
    shown = f"You asked: {body['message']}"
    return f"{shown}\nAnswer: {answer[:EXCHANGE_ANSWER_CHARS]}" if answer else shown


@dataclass
class PersonalView:
    """One user's memory as one request sees it: consolidated items not deleted since, pending items, the votes.

    ``share`` is the ``mix``: the part of ``top_k`` given to personal memory (0: none)."""

    user: str
    user_id: str | None
    share: float
    remember: bool
    items: list[dict[str, Any]]
    vectors: np.ndarray | None
    votes: dict[str, int]
    snapshot_id: str | None
    pending: int

    def nudges(self) -> dict[str, float]:
        return {c: nudge_factor(v) for c, v in self.votes.items() if v}

    def search(self, vector: np.ndarray, top_k: int, min_cosine: float) -> list[dict[str, Any]]:
        """Up to ``share`` × ``top_k`` items (at least one when ``share`` > 0) as similar as ``min_cosine``."""
        k = min(top_k, max(1, round(top_k * self.share))) if self.share > 0 else 0
        if not k or self.vectors is None or not len(self.items):
            return []
        scores = self.vectors @ vector
        out = []
        for i in np.argsort(-scores)[:k]:
            if scores[i] < min_cosine:
                break
            item = self.items[int(i)]
            out.append({
                "memory_id": item["item_id"], "kind": item["kind"], "content": item["text"],
                "created_at": item["created_at"], "score": round(float(scores[i]), 6), "personal": True,
                "provenance": {"store": "personal", "memory_id": item["item_id"], "kind": item["kind"],
                               "created_at": item["created_at"], "state": item["state"]},
            })  # fmt: skip
        return out

    def corpus_pool(self, corpus_k: int) -> int:
        """Corpus candidates to rank: a few more when this user's votes may move some in or out."""
        return corpus_k + (NUDGE_POOL if self.votes else 0) if corpus_k else 0

    def nudge(self, found: list[dict[str, Any]], counties: list[str], corpus_k: int) -> list[dict[str, Any]]:
        """Corpus results with this user's factors applied, re-ranked (the counties' own passages still first) and
        cut to ``corpus_k``."""
        factors = self.nudges()
        if not factors:
            return found[:corpus_k]
        out = []
        for result in found:
            factor = factors.get(result["chunk_id"], 1.0)
            if factor != 1.0:
                # a nudge is a boost like attention: it reorders, never moves the normalised (relevance) scale
                result = {**result, "score": result["score"] * factor}
            out.append(result)
        wanted = set(counties)
        out.sort(key=lambda r: (not (wanted and r["metadata"].get("county") in wanted), -r["score"]))
        return out[:corpus_k]

    def route(self, personal: list[dict[str, Any]], corpus: list[dict[str, Any]]) -> dict[str, Any]:
        """``route.personal``: the split, and the nudges that applied to this answer's passages."""
        factors = self.nudges()
        return {
            "user_id": self.user_id,
            "mix": self.share,
            "personal_passages": len(personal),
            "corpus_passages": len(corpus),
            "nudged": [
                {"chunk_id": p["chunk_id"], "factor": factors[p["chunk_id"]]}
                for p in corpus
                if p["chunk_id"] in factors
            ],
            "snapshot": self.snapshot_id,
            "pending": self.pending,
            "remembered": self.remember,
        }


def read_view(
    directory: Path,
    user: str,
    *,
    user_id: str | None = None,
    share: float = 0.0,
    remember: bool = False,
    retention_days: int = DEFAULT_RETENTION_DAYS,
    encode: Callable[[list[str]], np.ndarray] | None = None,
    model_id: str = "",
    now: datetime | None = None,
    dsn: str | None = None,
) -> PersonalView:
    """The user's memory now: the current snapshot's items minus those deleted since, plus the user's log rows after
    it (cards and exchanges; tombstones; votes), minus what is past retention. Pending items are embedded with
    ``encode`` (when given and ``share`` > 0), once per text per process. ``dsn``: the log's database
    (``log_for``)."""
    log = log_for(directory, dsn)
    for _ in range(3):  # a consolidation may switch CURRENT (and purge rows) between the two reads: read again
        snapshot = cached_snapshot(directory)
        through = snapshot.through_id if snapshot else 0
        tail = log.rows(user=user, after=through)
        if current_snapshot_id(directory) == (snapshot.snapshot_id if snapshot else None):
            break
    cutoff = event_iso((now or utc_now()) - timedelta(days=retention_days))
    items: dict[str, dict[str, Any]] = {}
    vectors: dict[str, np.ndarray] = {}
    votes: dict[str, int] = {}
    if snapshot is not None:
        same_model = not model_id or snapshot.model_id == model_id  # else its items are embedded again, here
        for i in snapshot.by_user.get(user, []):
            item = snapshot.items[i]
            items[item["item_id"]] = {**item, "state": "consolidated"}
            if same_model:
                vectors[item["item_id"]] = snapshot.vectors[i]
        votes = dict(snapshot.votes_by_user.get(user, {}))
    items, vectors, votes = _apply_tail(tail, user, items, vectors, votes)
    kept = [item for item in items.values() if item["created_at"] >= cutoff]
    matrix = None
    if share > 0 and kept:
        missing = [item["text"] for item in kept if item["item_id"] not in vectors]
        if missing and encode is not None:
            vectors.update(zip(
                [i["item_id"] for i in kept if i["item_id"] not in vectors], encoded(missing, encode, model_id),
                strict=True,
            ))  # fmt: skip
        kept = [item for item in kept if item["item_id"] in vectors]
        matrix = np.stack([vectors[item["item_id"]] for item in kept]) if kept else None
    pending = sum(1 for item in kept if item["state"] == "pending")
    snapshot_id = snapshot.snapshot_id if snapshot else None
    return PersonalView(user, user_id, share, remember, kept, matrix, votes, snapshot_id, pending)


def _apply_tail(
    tail: list[dict[str, Any]],
    user: str,
    items: dict[str, dict[str, Any]],
    vectors: dict[str, np.ndarray],
    votes: dict[str, int],
) -> tuple[dict[str, dict[str, Any]], dict[str, np.ndarray], dict[str, int]]:
    """The snapshot's items, vectors and votes with the user's log rows after it applied in order: a tombstone
    removes its item (or everything), a vote counts, a card or exchange is added as pending."""
    for row in tail:
        if row["kind"] == "delete":
            if row["item_id"] is None:
                items, vectors, votes = {}, {}, {}
            else:
                items.pop(row["item_id"], None)
        elif row["kind"] == "feedback":
            votes[row["item_id"]] = votes.get(row["item_id"], 0) + (1 if row["body"]["useful"] else -1)
        else:
            items[row["item_id"]] = {
                "user": user, "kind": row["kind"], "item_id": row["item_id"], "created_at": row["created_at"],
                "text": item_text(row["kind"], row["body"]), "log_id": row["id"], "state": "pending",
            }  # fmt: skip
    return items, vectors, votes


def encoded(texts: list[str], encode: Callable[[list[str]], np.ndarray], model_id: str) -> list[np.ndarray]:
    keys = [(model_id, hashlib.sha256(t.encode("utf-8")).hexdigest()) for t in texts]
    with _VECTORS_LOCK:
        found = {k: _VECTORS.get(k) for k in keys}
    todo = [t for t, k in zip(texts, keys, strict=True) if found[k] is None]
    if todo:
        fresh = encode(todo)
        with _VECTORS_LOCK:
            for t, v in zip(todo, fresh, strict=True):
                key = (model_id, hashlib.sha256(t.encode("utf-8")).hexdigest())
                _VECTORS[key] = found[key] = np.asarray(v, dtype=np.float32)
    return cast(list[np.ndarray], [found[k] for k in keys])  # every key is filled above
