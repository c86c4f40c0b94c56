"""What /context, /chat and /feedback take from a caller's personal memory (docs/personal-memory.md), and who that
caller is: the routes of /memory use the same (``serving.routers.memory``).

Personal memory is a store of its own (``livemem.personal``); every use needs an API key: the user is the
key's scope (only its hash is kept), or a ``user_id`` within it, so no caller can read another key's memory."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from livemem import personal
from livemem.answer.conversation import ANONYMOUS_SCOPE, caller_scope
from livemem.answer.routing import ContextRequest as Message
from serving.services.errors import UNAUTHORIZED_HEADERS, ServiceError

if TYPE_CHECKING:
    from serving.state import ServingState

NEEDS_KEY = (
    "personal memory needs an API key (X-API-Key or Authorization: Bearer): it is kept per key, and a caller "
    "without one cannot be told apart from any other"
)


def user_of(state: ServingState, scope: str, user_id: str | None) -> str:
    """The user a request speaks for; 401 for callers without a key (the public role's name is no key either)."""
    if scope in (ANONYMOUS_SCOPE, caller_scope(state.settings.public_role)):
        raise ServiceError(401, NEEDS_KEY, headers=UNAUTHORIZED_HEADERS)
    return personal.user_key(scope, user_id)


def admitted(write: Any) -> Any:
    """``write()``, with a new user beyond the key's ``LIVEMEM_PERSONAL_MAX_USERS_PER_KEY`` a 403."""
    try:
        return write()
    except personal.TooManyUsers as exc:
        raise ServiceError(403, str(exc)) from None


def personal_view(state: ServingState, scope: str, body: Any) -> personal.PersonalView | None:
    """The caller's memory for a /context or /chat body that asks for it (``mix``, ``user_id`` or ``remember``);
    None for one that does not (no store is read, and the answer cache is shared as before)."""
    if body.mix is None and body.user_id is None and not body.remember:
        return None
    user = user_of(state, scope, body.user_id)
    store = state.personal
    if body.remember:  # refused before answering, not after: the exchange could not be remembered
        admitted(lambda: personal.admit_user(store.directory, user, store.max_users, store.dsn))
    share = body.mix.personal if body.mix else 0.0
    retriever = state.retriever
    return personal.read_view(
        store.directory, user, user_id=body.user_id, share=share, remember=body.remember,
        retention_days=store.retention_days, model_id=retriever.model_id,
        encode=lambda texts: np.stack([retriever.encode(t) for t in texts]), dsn=store.dsn,
    )  # fmt: skip


def remember_exchange(state: ServingState, message: Message, result: dict[str, Any], endpoint: str) -> None:
    """Append the exchange to the caller's memory when the request asked for it (``remember``)."""
    view = message.personal
    if view is None or not view.remember:
        return
    answer = (result.get("answer") or {}).get("answer")
    chunk_ids = [p["chunk_id"] for p in result["unstructured"]]
    store = state.personal
    personal.add_exchange(
        store.directory, view.user, result["message"], answer, chunk_ids, endpoint, store.max_users, store.dsn
    )


def record_feedback(state: ServingState, scope: str, user_id: str | None, chunk_ids: list[str], useful: bool):
    """/feedback with ``personal: true``: the chunks are nudged for this user only (``livemem.personal``)."""
    user = user_of(state, scope, user_id)
    store = state.personal
    return admitted(lambda: personal.add_feedback(store.directory, user, chunk_ids, useful, store.max_users, store.dsn))
