"""/memory: the caller's personal memory (cards, remembered exchanges, feedback), and what /context, /chat and
/feedback take from it (docs/personal-memory.md).

Personal memory is a store of its own (``livemem.answer.personal``): the routes append to its log and read the user's
view; the index is never written. Every use needs an API key: the user is the key (only its hash is kept), or a
``user_id`` within it, so no caller can read or delete another key's memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from fastapi import APIRouter, HTTPException, Query, Request

from livemem.answer import personal
from livemem.answer.conversation import ANONYMOUS_SCOPE, caller_scope
from livemem.answer.routing import ContextRequest as Message
from serving.deps import CallerRole, State
from serving.models import ErrorBody
from serving.models.context import USER_ID_PATTERN
from serving.models.memory import Card, CardRequest, Deleted, Memory, MemoryItem, Nudge
from serving.state import ServingState

router = APIRouter(tags=["memory"])
ERRORS = {
    401: {"model": ErrorBody},
    403: {"model": ErrorBody, "description": "a new user_id beyond the key's LIVEMEM_PERSONAL_MAX_USERS_PER_KEY"},
    404: {"model": ErrorBody},
    409: {"model": ErrorBody},
    422: {"model": ErrorBody},
}
NEEDS_KEY = (
    "personal memory needs an API key (X-API-Key or Authorization: Bearer): it is kept per key, and a caller "
    "without one cannot be told apart from any other"
)
UserId = Query(None, pattern=USER_ID_PATTERN, description="a user within the API key's memory")


def store_dir(state: ServingState) -> Path:
    return personal.personal_dir_from_env(state.settings.index_dir)


def user_of(state: ServingState, scope: str, user_id: str | None) -> str:
    """The user a request speaks for; 401 for callers without a key (the public role's name is no key either)."""
    if scope in (ANONYMOUS_SCOPE, caller_scope(state.settings.public_role)):
        raise HTTPException(401, NEEDS_KEY)
    return personal.user_key(scope, user_id)


def request_scope(request: Request) -> str:
    from serving.routers.context import thread_scope  # the one place a request's key becomes its scope

    return thread_scope(request)


def personal_view(state: ServingState, scope: str, body: Any) -> personal.PersonalView | None:
    """The caller's memory for a /context or /chat body that asks for it (``mix``, ``user_id`` or ``remember``);
    None for one that does not (no store is read, and the answer cache is shared as before)."""
    if body.mix is None and body.user_id is None and not body.remember:
        return None
    user = user_of(state, scope, body.user_id)
    if body.remember:  # refused before answering, not after: the exchange could not be remembered
        admitted(lambda: personal.admit_user(store_dir(state), user))
    share = body.mix.personal if body.mix else 0.0
    retriever = state.retriever
    return personal.read_view(
        store_dir(state), user, user_id=body.user_id, share=share, remember=body.remember,
        retention_days=personal.retention_days_from_env(), model_id=retriever.model_id,
        encode=lambda texts: np.stack([retriever.encode(t) for t in texts]),
    )  # fmt: skip


def remember_exchange(state: ServingState, message: Message, result: dict[str, Any], endpoint: str) -> None:
    """Append the exchange to the caller's memory when the request asked for it (``remember``)."""
    view = message.personal
    if view is None or not view.remember:
        return
    answer = (result.get("answer") or {}).get("answer")
    chunk_ids = [p["chunk_id"] for p in result["unstructured"]]
    personal.add_exchange(store_dir(state), view.user, result["message"], answer, chunk_ids, endpoint)


def record_feedback(state: ServingState, request: Request, user_id: str | None, chunk_ids: list[str], useful: bool):
    """/feedback with ``personal: true``: the chunks are nudged for this user only (``livemem.answer.personal``)."""
    user = user_of(state, request_scope(request), user_id)
    return admitted(lambda: personal.add_feedback(store_dir(state), user, chunk_ids, useful))


def admitted(write: Any) -> Any:
    """``write()``, with a new user beyond the key's ``LIVEMEM_PERSONAL_MAX_USERS_PER_KEY`` a 403."""
    try:
        return write()
    except personal.TooManyUsers as exc:
        raise HTTPException(403, str(exc)) from None


def cleaned(text: str) -> str:
    if not text.strip():
        raise HTTPException(422, "text must contain some words")
    return text


@router.post("/memory", response_model=Card, status_code=201, responses=ERRORS)
def add_card(body: CardRequest, request: Request, state: State, role: CallerRole) -> Card:
    """Remember a card for the caller (or its `user_id`): searchable at once, consolidated nightly."""
    user = user_of(state, request_scope(request), body.user_id)
    try:
        return Card(**admitted(lambda: personal.add_card(store_dir(state), user, cleaned(body.text))))
    except personal.MemoryFull as exc:
        raise HTTPException(409, str(exc)) from None


@router.get("/memory", response_model=Memory, responses=ERRORS)
def list_memory(request: Request, state: State, role: CallerRole, user_id: str | None = UserId) -> Memory:
    """Everything the caller's memory holds now: cards, remembered exchanges and feedback nudges."""
    user = user_of(state, request_scope(request), user_id)
    days = personal.retention_days_from_env()
    view = personal.read_view(store_dir(state), user, user_id=user_id, retention_days=days)
    items = [MemoryItem(memory_id=i["item_id"], content=i["text"], **i) for i in view.items]
    nudges = [Nudge(chunk_id=c, votes=v, factor=personal.nudge_factor(v)) for c, v in view.votes.items() if v]
    return Memory(
        user_id=user_id, items=items, feedback=nudges, snapshot=view.snapshot_id, pending=view.pending,
        retention_days=days,
    )  # fmt: skip


@router.delete("/memory", response_model=Deleted, responses=ERRORS)
def delete_memory(request: Request, state: State, role: CallerRole, user_id: str | None = UserId) -> Deleted:
    """Forget all of the caller's memory: cards, exchanges and feedback. Reads stop seeing it at once; the next
    consolidation removes it from the log and the snapshots."""
    user = user_of(state, request_scope(request), user_id)
    done = personal.delete(store_dir(state), user)
    return Deleted(**done, effect="hidden now; removed physically at the next consolidation")


@router.delete("/memory/{memory_id}", response_model=Deleted, responses=ERRORS)
def delete_item(
    memory_id: str, request: Request, state: State, role: CallerRole, user_id: str | None = UserId
) -> Deleted:
    """Forget one card or exchange (404 when the caller's memory has none with this id)."""
    user = user_of(state, request_scope(request), user_id)
    view = personal.read_view(store_dir(state), user, retention_days=personal.retention_days_from_env())
    if memory_id not in {i["item_id"] for i in view.items}:
        raise HTTPException(404, "no memory with this id in your memory")
    done = personal.delete(store_dir(state), user, memory_id)
    return Deleted(**done, effect="hidden now; removed physically at the next consolidation")
