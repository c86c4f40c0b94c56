"""The deployment's home: the state or states whose programs it covers, and the name it answers as.

A ``Home`` decides what is local: which counties and towns a message's words are read as (``livemem.geo.places``),
which places are in scope and which are redirected, and how the redirect and the answer heading are worded
(docs/home.md). It comes from the sources file (``home:``, else the registry's ``state`` / ``states``, else West
Virginia: ``livemem.sources.home``), is recorded in every version's manifest (``home``) and read back by serving
(``Snapshot.home``, ``home_of``), so a version is always answered for the home it was built for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from livemem.geo.gazetteer import state_name

DEFAULT_STATE = "WV"
DEFAULT_NAME = "Living Memory"


@dataclass(frozen=True)
class Home:
    """The home states (postal abbreviations, the first the main one), the deployment's name and its crisis lines
    (``(label, number)`` pairs; empty: the built-in 911 / 988 wording)."""

    states: tuple[str, ...] = (DEFAULT_STATE,)
    name: str = DEFAULT_NAME
    crisis_lines: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        states = tuple(dict.fromkeys(s.strip().upper() for s in self.states if s and s.strip()))
        object.__setattr__(self, "states", states or (DEFAULT_STATE,))

    @property
    def state(self) -> str:
        """The main home state (the first)."""
        return self.states[0]

    def covers(self, state: str | None) -> bool:
        """Whether ``state`` (a postal abbreviation) is a home state."""
        return bool(state) and state in self.states

    @property
    def state_names(self) -> str:
        """The states' names: "West Virginia", "Florida and Georgia", "Florida, Georgia and Alabama"."""
        names = [state_name(s) for s in self.states]
        return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]

    @property
    def label(self) -> str:
        """The states' abbreviations as a scope reason names them ("WV", "FL/GA")."""
        return "/".join(self.states)

    def to_manifest(self) -> dict[str, Any]:
        """The manifest's ``home`` section."""
        out: dict[str, Any] = {"states": list(self.states), "name": self.name}
        if self.crisis_lines:
            out["crisis_lines"] = [{"name": n, "phone": p} for n, p in self.crisis_lines]
        return out

    def route(self) -> dict[str, Any]:
        """What an answer's route says of the home (``route.home``)."""
        return {"states": list(self.states), "name": self.name, "state_names": self.state_names}


WEST_VIRGINIA = Home()


def home_of(section: Any) -> Home:
    """The ``Home`` of a manifest's ``home`` section (or of a ``route.home``); West Virginia when there is none or
    it cannot be read (versions published before homes were recorded)."""
    if isinstance(section, Home):
        return section
    if not isinstance(section, dict) or not section.get("states"):
        return WEST_VIRGINIA
    states = section["states"]
    if isinstance(states, str):
        states = [states]
    lines = tuple(
        (str(c.get("name", "")), str(c.get("phone", "")))
        for c in section.get("crisis_lines") or []
        if isinstance(c, dict) and c.get("phone")
    )
    return Home(tuple(str(s) for s in states), str(section.get("name") or DEFAULT_NAME), lines)
