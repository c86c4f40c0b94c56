"""Places as a person names them, for self-querying: ZIP codes, counties, towns and states.

- **West Virginia towns → county** from a gazetteer (``livemem.geo.gazetteer``: GeoNames places, which take US
  places from GNIS), not from ZIP city names; a town the gazetteer lacks takes every county of its ZIP codes. A
  ZIP spanning several counties keeps all of them (``Place.counties``; the first is ``Place.county``).
- **Any US state** qualifies a place, by name or postal abbreviation, written after it ("Raleigh, NC", "Fayette
  County, Pennsylvania", "Columbus, Ohio", "Raleigh N.C."): such a place is in that state, never a West Virginia
  county or town of the same name. An unqualified West Virginia name in a message that names one other state
  (and not West Virginia) is taken as that state's place when the gazetteer has one of that name there ("SNAP in
  Raleigh? I live in North Carolina"). A capitalised name after "in / near / around / at / from" that is no West
  Virginia place but a US city of 20,000 people or more elsewhere is that city ("SNAP office in Columbus").
- **Misspellings** of West Virginia counties and towns are corrected when one name is close enough
  (``Place.corrected_from``): "Fayete County", "in Beckly".

Matching rules: county names match as ``<Name> County`` (any case) or, capitalised, on their own unless the name
is an ordinary word or a common first name; multi-word towns match in any case; one-word towns only capitalised,
not as the message's first word, and not when the name is an ordinary English word (``Man``, ``War``, ``Union``,
...) or a better-known city elsewhere (``London``, ``Dallas``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import cache

from livemem.geo.gazetteer import places_named, state_abbreviations, state_county_names, wv_towns, zip_counties
from livemem.geo.names import county_key
from livemem.geo.zips import state_counties, zip_data

STATE = "WV"
STATE_NAMES = {"WV": "West Virginia"}  # filled from the ``us`` package on first use (state_name)
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
    county: str | None  # the first of ``counties`` (None outside West Virginia)
    state: str  # postal abbreviation
    counties: tuple[str, ...] = ()  # every county: a ZIP or town spanning several keeps all
    corrected_from: str | None = None  # the misspelling this place corrects ("Fayete")
    qualified_by: str | None = (
        None  # the state written beside the place ("North Carolina" in "Raleigh, North Carolina")
    )

    @property
    def name(self) -> str:
        """The place as the answer names it: "Raleigh, NC", "Mount Hope", "Fayette County", "ZIP 25880"."""
        if self.kind == "zip":
            return f"ZIP {self.text}"
        if self.kind == "state":
            return state_name(self.state)
        base = self.corrected if self.corrected_from else self.text
        return base if self.state == STATE else f"{base}, {self.state}"

    @property
    def corrected(self) -> str:
        if self.kind == "county":
            return f"{self.county} County"
        return self.text


def state_name(abbr: str) -> str:
    if abbr not in STATE_NAMES:
        STATE_NAMES.update({a: n.title() for n, a in state_abbreviations().items() if "." not in n})
    return STATE_NAMES.get(abbr, abbr)


def _towns() -> dict[str, tuple[str, ...]]:
    """lower-case West Virginia town name → its counties (``livemem.geo.gazetteer.wv_towns``)."""
    return wv_towns()


@cache
def _town_pattern() -> re.Pattern[str]:
    names = sorted(_towns(), key=len, reverse=True)
    return re.compile(r"\b(" + "|".join(re.escape(n) for n in names) + r")\b", re.IGNORECASE)


@cache
def _county_pattern() -> re.Pattern[str]:
    names = sorted(state_counties(STATE).values(), key=len, reverse=True)
    return re.compile(r"\b(" + "|".join(re.escape(n) for n in names) + r")(\s+(?:county|co\.))?(?=\W|$)", re.IGNORECASE)


# Postal abbreviations that are also words: a state only in capitals right after a place (or after a comma), never
# on their own; ENGLISH_WORDS even then only after a comma at the end of a clause ("Raleigh County OR Fayette").
WORD_ABBREVIATIONS = frozenset(
    {"in", "or", "me", "ok", "hi", "oh", "al", "la", "pa", "de", "ma", "mo", "co", "id", "ga", "va"}
)
ENGLISH_WORDS = frozenset({"in", "or", "me", "ok", "hi", "oh"})
ZIP_PATTERN = re.compile(r"\b(\d{5})(?:-\d{4})?\b")
WV_FORMS = r"west virginia|w\. ?va\.?|w\. ?v\.|wv"


@cache
def _state_pattern() -> re.Pattern[str]:
    names = sorted((n for n in state_abbreviations() if n != "west virginia"), key=len, reverse=True)
    return re.compile(r"\b(" + WV_FORMS + "|" + "|".join(re.escape(n) for n in names) + r")(?=\W|$)", re.IGNORECASE)


@cache
def _abbreviations() -> dict[str, str]:
    """postal abbreviation, lower-case, also with dots ("n.c.") → abbreviation."""
    out = {}
    for abbr in set(state_abbreviations().values()):
        out[abbr.lower()] = abbr
        out[f"{abbr[0]}.{abbr[1]}.".lower()] = abbr
        out[f"{abbr[0]}. {abbr[1]}.".lower()] = abbr
    return out


def _state_of(text: str) -> str | None:
    """The state a written form names ("North Carolina", "NC", "N.C.", "W. Va."), None when none."""
    key = " ".join(text.lower().split())
    if re.fullmatch(WV_FORMS, key):
        return STATE
    return state_abbreviations().get(key) or _abbreviations().get(key)


QUALIFIER = re.compile(
    r"^(?:\s+(?:county|co\.))?\s*,?\s*(?:in\s+)?(?:the\s+state\s+of\s+)?"
    r"((?:[A-Za-z]\.\s?[A-Za-z]\.)|[A-Za-z]{2}\b|[A-Za-z][a-z]+(?:\s+[A-Za-z][a-z]+){0,2}|W\. ?Va\.?)"
)


def _qualifier(message: str, end: int) -> tuple[str, int, int] | None:
    """The state written right after a place ending at ``end`` (", North Carolina", " NC", " County, PA"): its
    text and where it starts and ends, or None. A postal abbreviation that is also a word (``OR``, ``IN``, ``OK``,
    ...) counts only after a comma and at the end of a clause; other abbreviations in capitals, or after a comma."""
    m = QUALIFIER.match(message[end:])
    if not m:
        return None
    text = m.group(1)
    words = text.split()
    comma = "," in message[end : end + m.start(1)]
    for n in range(len(words), 0, -1):  # "North Carolina" before "North"
        candidate = " ".join(words[:n])
        state = _state_of(candidate)
        if state is None:
            continue
        q_start = end + m.start(1)
        q_end = q_start + len(candidate) if n < len(words) else end + m.end(1)
        if len(candidate) == 2:
            if candidate.lower() in ENGLISH_WORDS:
                if not (comma and re.match(r"\s*(?:[.,;:!?)]|$)", message[q_end:])):
                    return None
            elif not (candidate.isupper() or comma):
                return None
        return candidate, q_start, q_end
    return None


def county_name(value: str) -> str | None:
    """The WV county named by ``value`` (``fayette county`` → ``Fayette``), None when it is not one."""
    return state_counties(STATE).get(county_key(value))


def zip_place(code: str) -> Place | None:
    found = zip_data().get(code)
    if found is None:
        return None
    counties = zip_counties(code) if found[0] == STATE else ((found[1],) if found[1] else ())
    return Place("zip", code, counties[0] if counties else None, found[0], counties)


def _elsewhere(place: Place, state: str, qualified_by: str | None) -> Place:
    """The same name as a place of another state."""
    return replace(place, county=None, counties=(), state=state, qualified_by=qualified_by)


def _exists_in(place: Place, state: str) -> bool:
    """Whether ``state`` has a place (or, for a name written with the word County, a county) of that name."""
    name = county_key(place.text).strip()
    if place.kind == "county" and name != place.text.strip().lower():
        return name in state_county_names(state)
    return bool(places_named(name, state)) or name in state_county_names(state)


NAME_BEFORE_WV = re.compile(r"\b([A-Z][a-z]{3,}(?:\.?\s+[A-Z][a-z]{2,})?)\.?,?\s+(?:WV|W\.\s?Va\.?|West Virginia)\b")
PREPOSITION_NAME = re.compile(r"\b(?:in|near|around|at|from|to|for)\s+([A-Z][a-z]{3,}(?:\s+[A-Z][a-z]{2,})?)")
COUNTY_PHRASE = re.compile(r"\b([A-Za-z][a-z]{3,}(?:\s+[A-Za-z][a-z]+)?)\s+(?:county|co\.)(?=\W|$)", re.IGNORECASE)
MIN_CITY_ELSEWHERE = 20000  # a capitalised unknown name is another state's city only when it is this big
FUZZY_CUTOFF = 84  # rapidfuzz ratio a misspelling must reach (Fayete / Fayette: 92; Beckly / Beckley: 92)


def _sounds(name: str) -> str:
    """A name as misspellings are compared: lower case, no spaces or dots, "ph" as "f" ("Sofia" / "Sophia",
    "Oakhill" / "Oak Hill")."""
    return re.sub(r"[\s.'-]", "", name.lower()).replace("ph", "f")


def _closest(word: str, names: list[str]) -> str | None:
    from rapidfuzz import fuzz, process

    found = process.extract(word, names, scorer=fuzz.ratio, limit=2, score_cutoff=FUZZY_CUTOFF, processor=_sounds)
    if not found or (len(found) > 1 and found[1][1] == found[0][1]):
        return None  # nothing close, or two names equally close: suggest nothing
    return found[0][0]


@cache
def _county_choices() -> list[str]:
    return sorted(c.lower() for c in state_counties(STATE).values())


@cache
def _town_choices() -> list[str]:
    return sorted(n for n in _towns() if len(n) >= 5)


def find_places(message: str) -> list[Place]:
    """Every ZIP, county, town and state named in the message, in the order they appear (see the module)."""
    found: list[tuple[int, Place]] = []
    taken: list[tuple[int, int]] = []

    def free(start: int, end: int) -> bool:
        return all(end <= s or start >= e for s, e in taken)

    def qualify(place: Place, start: int, end: int) -> None:
        """Record ``place`` (spanning start..end), in the state written right after it when one is."""
        qualifier = _qualifier(message, end)
        if qualifier is not None:
            text, q_start, q_end = qualifier
            state = _state_of(text) or STATE
            if state != STATE:
                place = _elsewhere(place, state, text)
            if free(q_start, q_end):
                found.append((q_start, Place("state", text, None, state)))
                taken.append((q_start, q_end))
        found.append((start, place))
        taken.append((start, end))

    def states() -> None:
        for m in _state_pattern().finditer(message):
            if not free(*m.span()):
                continue
            text = m.group(1)
            key = text.lower()
            if key == "virginia" and message[max(0, m.start() - 5) : m.start()].lower() == "west ":
                continue
            if key == "washington" and not re.match(r"\s*(?:state|dc|d\.c\.)\b", message[m.end() :], re.I):
                continue  # a name, a street or a county far more often than the state
            state = _state_of(text)
            if state:
                found.append((m.start(), Place("state", text, None, state)))
                taken.append(m.span())

    for m in ZIP_PATTERN.finditer(message):
        place = zip_place(m.group(1))
        if place is None and re.search(r"\b(?:zip(?: code)?|in|near|around)\s*$", message[: m.start()], re.I):
            place = Place("zip", m.group(1), None, "")  # a ZIP code that does not exist: state unknown ("")
        if place is not None:
            found.append((m.start(), place))
            taken.append(m.span())
    states()  # before towns: "North Carolina" is a state, not the WV town Carolina
    for m in _county_pattern().finditer(message):
        name, suffix = m.group(1), m.group(2)
        if not free(*m.span()):
            continue
        if not suffix and (name.lower() in AMBIGUOUS_NAMES or not name[0].isupper()):
            continue
        county = county_name(name)
        if county:
            qualify(Place("county", m.group(0), county, STATE, (county,)), *m.span())
    for m in _town_pattern().finditer(message):
        text = m.group(1)
        if not free(*m.span()):
            continue
        first_word = not message[: m.start()].strip()
        if " " not in text and (
            not text[0].isupper()
            or text.lower() in AMBIGUOUS_NAMES
            or (first_word and not places_named(text, STATE))  # a sentence's first word: only a gazetteer town
        ):
            continue
        counties = _towns()[text.lower()]
        canonical = re.sub(r"^mt\.?\s+", "mount ", text.lower()).title() if text.lower().startswith("mt") else None
        if canonical:
            place = Place("town", canonical, counties[0], STATE, counties, corrected_from=text)
        else:
            place = Place("town", text, counties[0], STATE, counties)
        qualify(place, *m.span())
    for m in re.finditer(r"(?<![A-Za-z])([A-Z]{2})(?![A-Za-z])", message):  # "SNAP in NC": capitals only
        if free(*m.span()) and not message.isupper() and m.group(1).lower() not in WORD_ABBREVIATIONS:
            state = _abbreviations().get(m.group(1).lower())
            if state and state != STATE and m.group(1) not in ("ZIP",):
                found.append((m.start(), Place("state", m.group(1), None, state)))
                taken.append(m.span())
    for m in COUNTY_PHRASE.finditer(message):  # "Fayete County": a misspelt West Virginia county
        if not free(*m.span()):
            continue
        words = m.group(1).split()
        for n in range(len(words)):
            word = " ".join(words[n:])
            if county_key(word) in {c.lower() for c in state_counties(STATE).values()}:
                break
            close = _closest(word, _county_choices())
            if close:
                county = county_name(close)
                start = m.start(1) + len(" ".join(words[:n])) + (1 if n else 0)
                qualify(
                    Place("county", f"{county} County", county, STATE, (county,), corrected_from=word), start, m.end()
                )
                break
    for pattern in (PREPOSITION_NAME, NAME_BEFORE_WV):  # "in Beckly", "Sofia WV": misspelt towns and counties
        for m in pattern.finditer(message):
            name = m.group(1)
            if not free(*m.span(1)) or _state_of(name) or name.lower() in AMBIGUOUS_NAMES:
                continue
            close = _closest(name, _county_choices()) or _closest(name, _town_choices())
            if close and county_name(close):
                county = county_name(close)
                qualify(Place("county", f"{county} County", county, STATE, (county,), corrected_from=name), *m.span(1))
            elif close:
                counties = _towns()[close]
                qualify(Place("town", close.title(), counties[0], STATE, counties, corrected_from=name), *m.span(1))
            elif pattern is PREPOSITION_NAME:
                elsewhere = [p for p in places_named(name) if p.state != STATE and p.population >= MIN_CITY_ELSEWHERE]
                if elsewhere:
                    qualify(Place("town", name, None, elsewhere[0].state, ()), *m.span(1))
    places = [p for _, p in sorted(found, key=lambda item: item[0])]
    # one other state named, West Virginia not: a West Virginia name that state also has is that state's place
    named_states = {p.state for p in places if p.kind == "state"}
    other = named_states - {STATE}
    if len(other) == 1 and STATE not in named_states:
        (state,) = other
        places = [
            _elsewhere(p, state, None)
            if p.kind in ("county", "town") and p.state == STATE and p.qualified_by is None and _exists_in(p, state)
            else p
            for p in places
        ]
    return places
