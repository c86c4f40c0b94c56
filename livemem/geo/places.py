"""West Virginia places for self-querying: ZIP → county, town → county, county names, from the zipcodes package.

Towns are the primary and acceptable city names of the state's ZIP codes; a town spanning several counties is
given the county of most of its ZIP codes (ties: alphabetical), and every candidate is kept. Matching rules:
county names match as ``<Name> County`` (any case) or, capitalised, on their own unless the name is an ordinary
word or a common first name; multi-word towns match in any case; one-word towns only capitalised, not as the
message's first word, and not when the name is an ordinary English word (``Man``, ``War``, ``Union``, ...) or a
better-known city elsewhere (``London``, ``Dallas``).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import cache

from livemem.geo.names import county_key, without_county_word
from livemem.geo.zips import state_counties, zip_data

STATE = "WV"
OTHER_STATES = {
    "ohio": "OH", "kentucky": "KY", "pennsylvania": "PA", "maryland": "MD", "virginia": "VA", "tennessee": "TN",
    "north carolina": "NC", "new york": "NY", "california": "CA", "texas": "TX", "florida": "FL",
}  # fmt: skip
# One-word town or county names that are ordinary words, first names, or better-known places elsewhere.
AMBIGUOUS_NAMES = frozenset(
    [
        "man",
        "war",
        "union",
        "washington",
        "cleveland",
        "dallas",
        "london",
        "miami",
        "orlando",
        "newark",
        "auto",
        "core",
        "job",
        "justice",
        "liberty",
        "independence",
        "hurricane",
        "industrial",
        "institute",
        "standard",
        "superior",
        "mountain",
        "lake",
        "rock",
        "harmony",
        "comfort",
        "junior",
        "enterprise",
        "english",
        "premier",
        "page",
        "prince",
        "given",
        "true",
        "diamond",
        "exchange",
        "friendly",
        "levels",
        "lookout",
        "odd",
        "panther",
        "points",
        "pool",
        "quick",
        "reader",
        "replete",
        "romance",
        "shock",
        "twilight",
        "wick",
        "cyclone",
        "tornado",
        "hundred",
        "duck",
        "trout",
        "cabins",
        "canvas",
        "carbon",
        "century",
        "chapel",
        "flower",
        "frame",
        "gay",
        "gem",
        "glen",
        "hunt",
        "pinch",
        "summers",
        "grant",
        "hardy",
        "wood",
        "clay",
        "lincoln",
        "jackson",
        "taylor",
        "webster",
        "lewis",
        "monroe",
        "jefferson",
        "morgan",
        "marshall",
        "mason",
        "wayne",
        "boone",
        "logan",
        "calhoun",
        "tucker",
        "preston",
        "marion",
        "hancock",
        "brooke",
        "putnam",
        "ritchie",
        "mercer",
        "roane",
        "wirt",
        "barbour",
        "doddridge",
        "gilmer",
        "harrison",
        "ohio",
        "wyoming",
        "mingo",
        "franklin",
        "madison",
        "wilson",
        "evans",
        "baker",
        "walker",
        "thomas",
        "julian",
        "arthur",
        "anthony",
        "elizabeth",
        "helen",
        "rachel",
        "vivian",
        "victor",
        "sherman",
        "gordon",
        "simon",
        "jesse",
        "nolan",
        "kyle",
        "leon",
    ]
)


@dataclass(frozen=True)
class Place:
    kind: str  # zip | county | town | state
    text: str  # as written in the message
    county: str | None
    state: str


@cache
def _towns() -> dict[str, tuple[str, ...]]:
    """lower-case town name → its counties, most ZIP codes first."""
    import zipcodes

    counts: dict[str, Counter] = {}
    for z in zipcodes.list_all():
        if z["state"] != STATE or not z["county"]:
            continue
        county = without_county_word(z["county"])
        for name in {z["city"], *(z.get("acceptable_cities") or [])}:
            counts.setdefault(name.lower(), Counter())[county] += 1
    return {t: tuple(sorted(c, key=lambda k: (-c[k], k))) for t, c in counts.items()}


@cache
def _town_pattern() -> re.Pattern[str]:
    names = sorted(_towns(), key=len, reverse=True)
    return re.compile(r"\b(" + "|".join(re.escape(n) for n in names) + r")\b", re.IGNORECASE)


@cache
def _county_pattern() -> re.Pattern[str]:
    names = sorted(state_counties(STATE).values(), key=len, reverse=True)
    return re.compile(r"\b(" + "|".join(re.escape(n) for n in names) + r")(\s+(?:county|co\.))?(?=\W|$)", re.IGNORECASE)


ZIP_PATTERN = re.compile(r"\b(\d{5})(?:-\d{4})?\b")
STATE_PATTERN = re.compile(
    r"\b(west virginia|w\. ?va\.|wv|" + "|".join(sorted(OTHER_STATES, key=len, reverse=True)) + r")\b", re.IGNORECASE
)


def county_name(value: str) -> str | None:
    """The WV county named by ``value`` (``fayette county`` → ``Fayette``), None when it is not one."""
    return state_counties(STATE).get(county_key(value))


def zip_place(code: str) -> Place | None:
    found = zip_data().get(code)
    if found is None:
        return None
    return Place("zip", code, found[1] or None, found[0])


def find_places(message: str) -> list[Place]:
    """Every ZIP, county, town and state named in the message, in the order they appear."""
    found: list[tuple[int, Place]] = []
    taken: list[tuple[int, int]] = []

    def free(start: int, end: int) -> bool:
        return all(end <= s or start >= e for s, e in taken)

    for m in ZIP_PATTERN.finditer(message):
        place = zip_place(m.group(1))
        if place is not None:
            found.append((m.start(), place))
            taken.append(m.span())
    for m in STATE_PATTERN.finditer(message):
        text = m.group(1)
        key = text.lower()
        if key == "virginia" and message[max(0, m.start() - 5) : m.start()].lower() == "west ":
            continue
        state = STATE if key in ("west virginia", "wv") or key.startswith("w.") else OTHER_STATES.get(key)
        if state:
            found.append((m.start(), Place("state", text, None, state)))
            taken.append(m.span())
    for m in _county_pattern().finditer(message):
        name, suffix = m.group(1), m.group(2)
        if not free(*m.span()):
            continue
        if not suffix and (name.lower() in AMBIGUOUS_NAMES or not name[0].isupper()):
            continue
        county = county_name(name)
        if county:
            found.append((m.start(), Place("county", m.group(0), county, STATE)))
            taken.append(m.span())
    for m in _town_pattern().finditer(message):
        text = m.group(1)
        if not free(*m.span()):
            continue
        if " " not in text and (
            not text[0].isupper() or text.lower() in AMBIGUOUS_NAMES or not message[: m.start()].strip()
        ):
            continue
        counties = _towns()[text.lower()]
        found.append((m.start(), Place("town", text, counties[0], STATE)))
        taken.append(m.span())
    return [p for _, p in sorted(found, key=lambda item: item[0])]
