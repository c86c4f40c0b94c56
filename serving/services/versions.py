"""The version a request answers from (``version`` / ``as_of``: docs/versions.md) and what it may show of it by
today's rules; shared by the query service, /context and /chat."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from livemem.engine.snapshot import Snapshot
from livemem.version.history import BadVersionReference, VersionNotFound, resolve
from serving.services.errors import ServiceError

if TYPE_CHECKING:
    from serving.state import Role, ServingState


def snapshot_for(
    state: ServingState, role: Role, version: str | None, as_of: str | None, loaded: Snapshot | None = None
) -> tuple[Snapshot, dict | None]:
    """The snapshot a request answers from, and (when it named a version) which one and whether it is current.

    No ``version`` / ``as_of``: the version CURRENT names, as always, and None. Otherwise the named kept version:
    the loaded current snapshot (``loaded``, the request's ``CurrentSnapshot``) when it is that one, else one of the
    process' open older versions (``ServingState.older``, an LRU sharing segments with CURRENT). Unknown: 404;
    malformed: 422."""
    if version is None and as_of is None:
        return loaded or state.reader.snapshot(), None
    try:
        found = resolve(state.reader.home, version, as_of, role.access)
    except VersionNotFound as exc:
        raise ServiceError(404, str(exc)) from None
    except BadVersionReference as exc:
        raise ServiceError(422, str(exc)) from None
    current = loaded or state.reader.snapshot()
    snap = current if current.version_id == found.version_id else state.older.get(found.version_id)
    return snap, found.to_dict()  # current: whether CURRENT names it now (the resolution read CURRENT)


def readable_today(snap: Snapshot, current: Snapshot, role: Role) -> list[str]:
    """The collections of ``snap`` the role may read, by today's rules as well: a collection the current version
    holds at an access level the role may not read is not shown from an older version either."""
    return [c for c in snap.collections_for(role.access) if current.access_of.get(c, snap.access_of[c]) in role.access]


def narrowed_today(message: Any, snap: Snapshot, state: ServingState, role: Role, answered_from: dict | None) -> Any:
    """A /context or /chat message (``livemem.answer.routing.ContextRequest``) answered from an older version: its
    collections less those today's version hides from the role (``readable_today``); unchanged for CURRENT."""
    if answered_from is None:
        return message
    allowed = readable_today(snap, state.reader.snapshot(), role)
    chosen = tuple(c for c in (message.collections or allowed) if c in allowed)
    # () would mean "every collection the role may read" in that version: "" names none (no collection is "")
    return replace(message, collections=chosen or ("",))
