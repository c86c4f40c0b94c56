"""Personal memory: the writes of the API (cards, exchanges, feedback, deletes), bounded per user and key.

Part of ``livemem.personal`` (its package docstring says how personal memory works)."""

from __future__ import annotations

import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from livemem.personal.common import DEFAULT_MAX_USERS, MAX_ITEMS, MemoryFull, TooManyUsers, normalized_text
from livemem.personal.log import log_for
from livemem.personal.snapshots import cached_snapshot
from livemem.personal.view import read_view


def users_holding(directory: Path, scope: str, dsn: str | None = None) -> set[str]:
    """The users of the key ``scope`` (its own, and each ``user_id`` within it) whose memory holds something now: a
    row after their last delete-all in the log, or a part of the current snapshot no delete-all has covered since.
    ``dsn``: the log's Postgres database, None: ``log.sqlite`` (``log_for``; every function here takes it)."""
    rows = log_for(directory, dsn).users_of(scope)
    snapshot = cached_snapshot(directory)
    through = snapshot.through_id if snapshot else 0
    consolidated = set(snapshot.by_user) | set(snapshot.votes_by_user) if snapshot else set()
    mine = {u for u in consolidated if u == scope or u.startswith(scope + "/")}
    holding = {u for u, (kept, wiped) in rows.items() if kept > wiped}
    return holding | {u for u in mine if rows.get(u, (0, 0))[1] <= through}


def admit_user(directory: Path, user: str, max_users: int = DEFAULT_MAX_USERS, dsn: str | None = None) -> None:
    """``TooManyUsers`` when ``user`` would be a new user of its key (holding nothing yet) and the key already
    keeps memory for ``max_users`` (the entry point's ``LIVEMEM_PERSONAL_MAX_USERS_PER_KEY``). A user whose memory
    was deleted whole frees its place at once."""
    scope = user.split("/", 1)[0]
    holding = users_holding(directory, scope, dsn)
    if user not in holding and len(holding) >= max_users:
        raise TooManyUsers(
            f"this API key keeps personal memory for {len(holding)} users, the most it may "
            f"(LIVEMEM_PERSONAL_MAX_USERS_PER_KEY): delete one (DELETE /memory?user_id=...) or use an existing user_id"
        )


def add_card(
    directory: Path,
    user: str,
    text: str,
    now: datetime | None = None,
    max_users: int = DEFAULT_MAX_USERS,
    dsn: str | None = None,
) -> dict[str, Any]:
    """Append a memory card, or return the user's identical visible card (same words, any case and spacing).
    ``MemoryFull`` when the user already holds ``MAX_ITEMS``; ``TooManyUsers`` when the user is new and its key
    already has the most users it may (``admit_user``)."""
    view = read_view(directory, user, dsn=dsn)
    same = normalized_text(text)
    for item in view.items:
        if item["kind"] == "card" and normalized_text(item["text"]) == same:
            return {"memory_id": item["item_id"], "created_at": item["created_at"], "duplicate": True}
    if len(view.items) >= MAX_ITEMS:
        raise MemoryFull(f"this memory holds {len(view.items)} items, the most it may: delete some first")
    if not view.items and not view.votes:
        admit_user(directory, user, max_users, dsn)
    row = log_for(directory, dsn).append(user, "card", str(uuid.uuid4()), {"text": text}, now)
    return {"memory_id": row["item_id"], "created_at": row["created_at"], "duplicate": False}


def add_exchange(
    directory: Path,
    user: str,
    message: str,
    answer: str | None,
    chunk_ids: list[str],
    endpoint: str,
    max_users: int = DEFAULT_MAX_USERS,
    dsn: str | None = None,
) -> dict[str, Any] | None:
    """Append a remembered exchange (None, and nothing written, when the user's memory is full or the user would
    be one too many for its key)."""
    view = read_view(directory, user, dsn=dsn)
    if len(view.items) >= MAX_ITEMS:
        return None
    if not view.items and not view.votes:
        try:
            admit_user(directory, user, max_users, dsn)
        except TooManyUsers:
            return None
    body = {"message": message, "answer": answer, "chunk_ids": chunk_ids[:20], "endpoint": endpoint}
    row = log_for(directory, dsn).append(user, "exchange", str(uuid.uuid4()), body)
    return {"memory_id": row["item_id"], "created_at": row["created_at"]}


def add_feedback(
    directory: Path,
    user: str,
    chunk_ids: list[str],
    useful: bool,
    max_users: int = DEFAULT_MAX_USERS,
    dsn: str | None = None,
) -> int:
    """A vote per chunk (``TooManyUsers`` when the user is new and its key has the most users it may)."""
    view = read_view(directory, user, dsn=dsn)
    if not view.items and not view.votes:
        admit_user(directory, user, max_users, dsn)
    log = log_for(directory, dsn)
    for chunk_id in chunk_ids:
        log.append(user, "feedback", chunk_id, {"useful": useful})
    return len(chunk_ids)


def delete(directory: Path, user: str, memory_id: str | None = None, dsn: str | None = None) -> dict[str, Any]:
    """A tombstone: everything of the user (``memory_id`` None) or one item. Reads honour it at once."""
    row = log_for(directory, dsn).append(user, "delete", memory_id, {})
    return {"deleted": memory_id or "all", "at": row["created_at"]}
