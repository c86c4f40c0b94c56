"""Conversations carry context: the place, persona and topic earlier turns named, carried forward to a message
that does not name them itself ("I live in Oak Hill", then "where can I get WIC?" is about Fayette County).

A thread's state (``ThreadState``) is small and derived: a county or ZIP and the words that named it, a persona,
a topic. It never holds the messages. It comes from one of two places:

- the request's own history (``messages`` of ``/v1/chat/completions``, ``history`` of ``/context`` and ``/chat``):
  the robust path, right whichever worker answers;
- otherwise ``ThreadStore``, per process, keyed by the caller's API key (hashed) and ``thread_id``: bounded,
  expiring, memory only (serving never writes the index). With several workers a thread's next message may reach
  a worker that has not seen the thread, so clients that need certainty send the history.

The latest turn wins: a message naming a place, persona or topic replaces the thread's (a place outside the
deployment's home states clears the thread's place, so nothing from home is carried into it). Places are read for
the home of the version answering (``home``: livemem.geo.home; West Virginia by default).
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field, replace
from typing import Any

from cachetools import TTLCache

from livemem.answer.routing import RESOURCE_PATTERNS, resource_types, route_intents
from livemem.geo.home import WEST_VIRGINIA, Home
from livemem.geo.places import find_places, zip_place

ANONYMOUS_SCOPE = "anonymous"
# Only the latest earlier turns, and the start of each, are read: enough for a place or topic named in a chat, and
# it bounds the work one request can ask for (place lookup costs ≈ 13 µs per character).
HISTORY_TURNS = 10
HISTORY_CHARS = 600


@dataclass(frozen=True)
class ThreadState:
    """What a conversation has established so far."""

    county: str | None = None
    zip: str | None = None
    place: str | None = None  # the words that named the place ("Oak Hill", "25840", "Fayette County")
    elsewhere: str | None = None  # a place outside the home states the conversation is about ("Raleigh, NC")
    persona: str | None = None
    topic: str | None = None
    turns: int = 0


@dataclass(frozen=True)
class Carried:
    """One message with what its conversation filled in, the notes shown in ``route.conversation``, and the
    thread's state after this message."""

    message: str
    county: str | None
    zip: str | None
    persona: str | None
    place_from: str | None  # "conversation: town Oak Hill" when the place came from an earlier turn
    notes: dict[str, Any] | None
    state: ThreadState = field(default_factory=ThreadState)


def topic_of(message: str, home: Home = WEST_VIRGINIA) -> str | None:
    """The topic a message names: its program words, or, for a governance or factual question, its words without
    its places. None for a message with no topic of its own ("what are the hours?", "what about Raleigh?")."""
    intents, _ = route_intents(message)
    words = [m.group(0) for p in RESOURCE_PATTERNS.values() for m in p.finditer(message)]
    if words:
        return ", ".join(dict.fromkeys(w.lower() for w in words))
    if set(intents) - {"general", "spatial", "greeting"}:
        text = message
        for place in find_places(message, home):
            text = text.replace(place.text, "")
        return " ".join(text.split()) or None
    return None


def names_place(
    message: str, county: str | None, zip_code: str | None, profile: dict[str, Any], home: Home = WEST_VIRGINIA
) -> bool:
    """Whether the message (or its request fields) names a place of its own."""
    if county or zip_code or profile.get("county") or profile.get("zip"):
        return True
    return any(p.kind != "state" or not home.covers(p.state) for p in find_places(message, home))


def advance(
    state: ThreadState,
    message: str,
    county: str | None = None,
    zip_code: str | None = None,
    profile: dict[str, Any] | None = None,
    persona: str | None = None,
    home: Home = WEST_VIRGINIA,
) -> ThreadState:
    """The thread after one user turn: a place, persona or topic it names replaces the thread's."""
    profile = profile or {}
    county = county or (profile.get("county") if isinstance(profile.get("county"), str) else None)
    zip_code = zip_code or (profile.get("zip") if isinstance(profile.get("zip"), str) else None)
    changes: dict[str, Any] = {"turns": state.turns + 1}
    if county or zip_code:
        zip_county = zip_place(zip_code, home) if zip_code else None
        changes |= {
            "county": county or (zip_county.county if zip_county and home.covers(zip_county.state) else None),
            "zip": zip_code,
            "place": county or zip_code,
        }
    else:
        places = [p for p in find_places(message, home) if p.kind != "state" or not home.covers(p.state)]
        if places:
            place = next((p for p in reversed(places) if p.kind != "state"), places[-1])
            in_wv = home.covers(place.state)
            changes |= {
                "county": place.county if in_wv else None,
                "zip": place.text if place.kind == "zip" and in_wv else None,
                "place": place.text if in_wv else None,
                "elsewhere": None if in_wv or not place.state else place.name,
            }
    if persona:
        changes["persona"] = persona
    if (topic := topic_of(message, home)) is not None:
        changes["topic"] = topic
    return replace(state, **changes)


def from_history(turns: list[str], home: Home = WEST_VIRGINIA) -> ThreadState:
    """The state of a conversation from its earlier user turns, oldest first (the latest ``HISTORY_TURNS``, each
    read up to ``HISTORY_CHARS``; ``turns`` counts them all)."""
    state = ThreadState(turns=max(0, len(turns) - HISTORY_TURNS))
    for turn in turns[-HISTORY_TURNS:]:
        state = advance(state, turn[:HISTORY_CHARS], home=home)
    return state


def carry(
    state: ThreadState,
    message: str,
    *,
    county: str | None = None,
    zip_code: str | None = None,
    profile: dict[str, Any] | None = None,
    persona: str | None = None,
    source: str = "thread",
    max_chars: int = 4000,
    home: Home = WEST_VIRGINIA,
) -> Carried:
    """``message`` with the place, topic and persona of its conversation where it names none itself.

    Place: when neither the message nor the request names one, the thread's county / ZIP (the self-query notes say
    it came from the conversation). Topic: when the message has no program words and no intent beyond general /
    place words, the thread's topic is added ("what are the hours? (about: pantry)"). Persona: the thread's, when
    the request names none (it is still checked against the caller's access)."""
    profile = profile or {}
    after = advance(state, message, county, zip_code, profile, persona, home)
    intents, _ = route_intents(message)
    if state.turns == 0 or intents == ["greeting"]:
        return Carried(message, county, zip_code, persona, None, None, after)
    carried: dict[str, Any] = {}
    place_from = None
    if not names_place(message, county, zip_code, profile, home) and (state.county or state.zip):
        county, zip_code = state.county, state.zip
        place_from = f"conversation: {state.place}"
        carried["place"] = {"county": state.county, "zip": state.zip, "from": state.place}
    elif not names_place(message, county, zip_code, profile, home) and state.elsewhere:
        # a conversation about a place outside the home states stays there: the place is named again, so the
        # message is routed (redirected) as its first turn was, never answered with home programs
        message = f"{message} (in {state.elsewhere})"[:max_chars]
        carried["place"] = {"county": None, "zip": None, "from": state.elsewhere}
    if state.topic and not resource_types(message) and set(intents) <= {"general", "spatial"}:
        message = f"{message} (about: {state.topic})"[:max_chars]
        carried["topic"] = state.topic
    if persona is None and state.persona:
        persona = state.persona
        carried["persona"] = state.persona
    notes = {"source": source, "earlier_turns": state.turns, "carried": carried}
    return Carried(message, county, zip_code, persona, place_from, notes, after)


def caller_scope(api_key: str | None) -> str:
    """Whose threads a request may read: the hash of its API key (never the key itself). Callers without a key
    share one scope, in which the ``thread_id`` is the only secret: such clients should use random ids."""
    if not api_key:
        return ANONYMOUS_SCOPE
    return hashlib.sha256(api_key.encode()).hexdigest()[:32]


class ThreadStore:
    """Thread states per (caller scope, thread_id): at most ``max_threads``, each forgotten ``ttl_s`` after its
    last message; ``max_threads`` 0 keeps none. One process's memory only."""

    def __init__(self, max_threads: int, ttl_s: float) -> None:
        self._states: TTLCache | None = TTLCache(max_threads, ttl_s) if max_threads > 0 else None
        self._lock = threading.Lock()

    def get(self, scope: str, thread_id: str | None) -> ThreadState | None:
        if self._states is None or not thread_id:
            return None
        with self._lock:
            return self._states.get((scope, thread_id))

    def put(self, scope: str, thread_id: str | None, state: ThreadState) -> None:
        if self._states is None or not thread_id:
            return
        with self._lock:
            self._states[(scope, thread_id)] = state

    def __len__(self) -> int:
        return 0 if self._states is None else len(self._states)
