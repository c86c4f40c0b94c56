"""/memory: the caller's personal memory (cards, remembered exchanges, feedback), and what /context, /chat and
/feedback take from it (docs/personal-memory.md).

Personal memory is a store of its own (``livemem.personal``): the routes append to its log and read the user's
view; the index is never written. Every use needs an API key: the user is the key (only its hash is kept), or a
``user_id`` within it, so no caller can read or delete another key's memory.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request

from livemem import personal
from serving.deps import CallerRole, State, thread_scope
from serving.models import ErrorBody
from serving.models.context import USER_ID_PATTERN
from serving.models.memory import Card, CardRequest, Deleted, Memory, MemoryItem, Nudge
from serving.services.memory import admitted, user_of

router = APIRouter(tags=["memory"])
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody},
    403: {"model": ErrorBody, "description": "a new user_id beyond the key's LIVEMEM_PERSONAL_MAX_USERS_PER_KEY"},
    404: {"model": ErrorBody},
    409: {"model": ErrorBody},
    422: {"model": ErrorBody},
}
UserId = Query(
    None, pattern=USER_ID_PATTERN, description="a user within the API key's memory", examples=["client-1042"]
)


def request_scope(request: Request) -> str:
    return thread_scope(request)  # the one place a request's key becomes its scope (serving.deps)


def cleaned(text: str) -> str:
    if not text.strip():
        raise HTTPException(422, "text must contain some words")
    return text


@router.post("/memory", response_model=Card, status_code=201, responses=ERRORS)
def add_card(body: CardRequest, request: Request, state: State, role: CallerRole) -> Card:
    """Remember a card for the caller (or its `user_id`): searchable at once, consolidated nightly."""
    user = user_of(state, request_scope(request), body.user_id)
    store, text = state.personal, cleaned(body.text)
    try:
        return Card(
            **admitted(lambda: personal.add_card(store.directory, user, text, None, store.max_users, store.dsn))
        )
    except personal.MemoryFull as exc:
        raise HTTPException(409, str(exc)) from None


@router.get("/memory", response_model=Memory, responses=ERRORS)
def list_memory(request: Request, state: State, role: CallerRole, user_id: str | None = UserId) -> Memory:
    """Everything the caller's memory holds now: cards, remembered exchanges and feedback nudges."""
    user = user_of(state, request_scope(request), user_id)
    store = state.personal
    days = store.retention_days
    view = personal.read_view(store.directory, user, user_id=user_id, retention_days=days, dsn=store.dsn)
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
    store = state.personal
    done = personal.delete(store.directory, user, dsn=store.dsn)
    return Deleted(**done, effect="hidden now; removed physically at the next consolidation")


@router.delete("/memory/{memory_id}", response_model=Deleted, responses=ERRORS)
def delete_item(
    memory_id: Annotated[
        str,
        Path(
            description="a card's or exchange's `memory_id` (from POST or GET /memory)",
            examples=["9d2f6a0e-41c7-4b8e-a3f5-7c0e1b2d9a64"],
        ),
    ],
    request: Request,
    state: State,
    role: CallerRole,
    user_id: str | None = UserId,
) -> Deleted:
    """Forget one card or exchange (404 when the caller's memory has none with this id)."""
    user = user_of(state, request_scope(request), user_id)
    store = state.personal
    view = personal.read_view(store.directory, user, retention_days=store.retention_days, dsn=store.dsn)
    if memory_id not in {i["item_id"] for i in view.items}:
        raise HTTPException(404, "no memory with this id in your memory")
    done = personal.delete(store.directory, user, memory_id, dsn=store.dsn)
    return Deleted(**done, effect="hidden now; removed physically at the next consolidation")
