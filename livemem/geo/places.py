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
from dataclasses import dataclass, field, replace
from functools import cache

from livemem.geo.gazetteer import (
    places_named,
    state_abbreviations,
    state_county_names,
    state_name,
    state_towns,
    wv_towns,
    zip_counties,
)
from livemem.geo.home import DEFAULT_STATE, WEST_VIRGINIA, Home
from livemem.geo.names import county_key
from livemem.geo.zips import state_counties, zip_data

STATE = DEFAULT_STATE  # the default home's state (a deployment's own come from its ``Home``: livemem.geo.home)
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
        # county names of other homes that are ordinary words, first names or better-known places elsewhere
        "orange",
        "bay",
        "lee",
        "martin",
        "gulf",
        "citrus",
        "glades",
        "charlotte",
        "columbia",
        "hamilton",
        "highlands",
        "holmes",
        "levy",
        "christmas",
        "golden",
    ]
)
# A name of AMBIGUOUS_NAMES is still a home place when the most populous US place of that name is in a home state
# and at least this big ("Miami" for a Florida home; no West Virginia place is this big).
HOME_CITY_POPULATION = 50_000
# A one-word home town written in lower case counts only after "in / near / ..." and when this big ("in hialeah").
LOWER_TOWN_POPULATION = 10_000


@dataclass(frozen=True)
class Place:
    kind: str  # zip | county | town | state
    text: str  # as written in the message
    county: str | None  # the first of ``counties`` (None outside the home states)
    state: str  # postal abbreviation
    counties: tuple[str, ...] = ()  # every county: a ZIP or town spanning several keeps all
    corrected_from: str | None = None  # the misspelling this place corrects ("Fayete")
    qualified_by: str | None = (
        None  # the state written beside the place ("North Carolina" in "Raleigh, North Carolina")
    )
    home: tuple[str, ...] = field(default=(STATE,), compare=False, repr=False)  # the home states it was read for

    @property
    def name(self) -> str:
        """The place as the answer names it: "Raleigh, NC", "Mount Hope", "Fayette County", "ZIP 25880"."""
        if self.kind == "zip":
            return f"ZIP {self.text}"
        if self.kind == "state":
            return state_name(self.state)
        base = self.corrected if self.corrected_from else self.text
        return base if self.state in self.home else f"{base}, {self.state}"

    @property
    def corrected(self) -> str:
        if self.kind == "county":
            return f"{self.county} County"
        return self.text


def _forms(name: str) -> list[str]:
    """The lower-case forms people write a county or town name in: as it is, with a space or nothing for a hyphen
    ("miami dade"), and "Saint" as "St." or "St" and back ("st. lucie", "saint lucie", "st lucie")."""
    key = " ".join(name.lower().split())
    forms = [key, key.replace("-", " ")]
    for form in list(forms):
        m = re.match(r"^(?:saint|st\.?)\s+(.+)$", form)
        if m:
            forms += [f"saint {m.group(1)}", f"st. {m.group(1)}", f"st {m.group(1)}"]
    return list(dict.fromkeys(forms))


@cache
def _home_counties(states: tuple[str, ...]) -> dict[str, tuple[str, str]]:
    """lower-case county name, in every form people write it (``_forms``; and the part after a hyphen on its own:
    "dade" for Miami-Dade) → (state, county as the ZIP data names it), for the home states, the first state first."""
    out: dict[str, tuple[str, str]] = {}
    tails: dict[str, tuple[str, str]] = {}
    for state in states:
        for county in state_counties(state).values():
            for form in _forms(county):
                out.setdefault(form, (state, county))
            if "-" in county:
                tail = county.rsplit("-", 1)[1].lower()
                if len(tail) >= 4:
                    tails.setdefault(tail, (state, county))
    for tail, found in tails.items():
        out.setdefault(tail, found)  # never over a county of that name
    return out


def _county_of(value: str, states: tuple[str, ...]) -> tuple[str, str] | None:
    return _home_counties(states).get(" ".join(county_key(value).split()))


def _chosen_county(value: str, states: tuple[str, ...]) -> tuple[str, str]:
    """``_county_of`` a name drawn from ``_county_choices``, which always names one."""
    county = _county_of(value, states)
    if county is None:
        raise KeyError(f"{value!r} is no home county of {states}")
    return county


def _gazetteer_county(state: str, county: str) -> str:
    """A gazetteer county as the ZIP data names it ("Saint Johns" → "St. Johns", "Desoto" → "DeSoto")."""
    found = _home_counties((state,)).get(" ".join(county.lower().split()))
    return found[1] if found else county


@cache
def _towns(states: tuple[str, ...]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """lower-case town name of the home states → (its state, its counties) (``livemem.geo.gazetteer.state_towns``;
    "Saint" names also as "St." and "St"), the first state first."""
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for state in states:
        towns = wv_towns() if state == "WV" else state_towns(state)
        for name, counties in towns.items():
            if state != "WV":
                counties = tuple(dict.fromkeys(_gazetteer_county(state, c) for c in counties))
            out.setdefault(name, (state, counties))
    if states != ("WV",):
        for name in list(out):
            for form in _forms(name)[1:]:
                out.setdefault(form, out[name])
    return out


@cache
def _town_pattern(states: tuple[str, ...]) -> re.Pattern[str]:
    names = sorted(_towns(states), key=len, reverse=True)
    return re.compile(r"\b(" + "|".join(re.escape(n) for n in names) + r")\b", re.IGNORECASE)


@cache
def _county_pattern(states: tuple[str, ...]) -> re.Pattern[str]:
    names = sorted(_home_counties(states), key=len, reverse=True)
    return re.compile(r"\b(" + "|".join(re.escape(n) for n in names) + r")(\s+(?:county|co\.))?(?=\W|$)", re.IGNORECASE)


def _ambiguous(name: str, states: tuple[str, ...]) -> bool:
    """Whether a one-word name is an ordinary word, a first name or a better-known place elsewhere: one of
    AMBIGUOUS_NAMES, unless the most populous US place of that name is a big city of a home state ("Miami")."""
    key = name.lower()
    if key not in AMBIGUOUS_NAMES:
        return False
    top = places_named(key)[:1]
    return not (top and top[0].state in states and top[0].population >= HOME_CITY_POPULATION)


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
        return "WV"
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


def county_name(value: str, home: Home = WEST_VIRGINIA) -> str | None:
    """The home county named by ``value`` (``fayette county`` → ``Fayette``; for a Florida home ``Dade`` →
    ``Miami-Dade``), None when it is not one."""
    found = _county_of(value, home.states)
    return found[1] if found else None


def town_counties(name: str, home: Home = WEST_VIRGINIA) -> tuple[str, ...]:
    """The counties of the home town called ``name`` (any case; "Mt Hope", "St. Augustine"), () when no home state
    has a town of that name (the first home state wins when two do)."""
    found = _towns(home.states).get(" ".join(name.lower().split()))
    return found[1] if found else ()


def zip_place(code: str, home: Home = WEST_VIRGINIA) -> Place | None:
    found = zip_data().get(code)
    if found is None:
        return None
    counties = zip_counties(code) if found[0] in home.states else ((found[1],) if found[1] else ())
    if found[0] in home.states and found[0] != "WV":
        counties = tuple(dict.fromkeys(_gazetteer_county(found[0], c) for c in counties))
    return Place("zip", code, counties[0] if counties else None, found[0], counties, home=home.states)


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
# lower case after a preposition ("wic in hialeah", "food in browrd"): home towns of LOWER_TOWN_POPULATION or more
# and home counties only, by name or close misspelling
PREPOSITION_LOWER = re.compile(r"\b(?:in|near|around|at|from)\s+([a-z][a-z-]{4,}(?:\s+[a-z][a-z]{2,})?)\b")
LOWER_WORDS = frozenset({"summer", "spring", "winter", "person", "general"})  # close to a county, not one
HYPHENATED = re.compile(r"\b([A-Za-z][a-z]{2,}-[A-Za-z][a-z]{2,})\b")  # "Miami-Dad": a misspelt hyphenated county
COUNTY_PHRASE = re.compile(r"\b([A-Za-z][a-z]{3,}(?:[\s-]+[A-Za-z][a-z]+)?)\s+(?:county|co\.)(?=\W|$)", re.IGNORECASE)
MIN_CITY_ELSEWHERE = 20000  # a capitalised unknown name is another state's city only when it is this big
FUZZY_CUTOFF = 84  # rapidfuzz ratio a misspelling must reach (Fayete / Fayette: 92; Beckly / Beckley: 92)


@cache
def _name_before_home(states: tuple[str, ...]) -> re.Pattern[str]:
    """A place written before a home state ("Sofia WV", "Hialeh, FL", "Hialeh Florida")."""
    if states == ("WV",):
        return NAME_BEFORE_WV
    forms = [r"WV|W\.\s?Va\.?|West Virginia"] if "WV" in states else []
    forms += [f"{s}|{re.escape(state_name(s))}" for s in states if s != "WV"]
    return re.compile(r"\b([A-Z][a-z]{3,}(?:\.?\s+[A-Z][a-z]{2,})?)\.?,?\s+(?:" + "|".join(forms) + r")\b")


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
def _county_choices(states: tuple[str, ...]) -> list[str]:
    """The home counties' names (lower case) a misspelling is compared with: each county once, as it is named."""
    return sorted({c.lower() for s in states for c in state_counties(s).values()})


@cache
def _town_choices(states: tuple[str, ...]) -> list[str]:
    return sorted(n for n in _towns(states) if len(n) >= 5)


@cache
def _big_town_choices(states: tuple[str, ...]) -> list[str]:
    """Home towns a lower-case word may name: those of LOWER_TOWN_POPULATION people or more."""
    return sorted(n for n in _towns(states) if len(n) >= 5 and _population(n, states) >= LOWER_TOWN_POPULATION)


def _population(name: str, states: tuple[str, ...]) -> int:
    return max((p.population for p in places_named(name) if p.state in states), default=0)


def find_places(message: str, home: Home = WEST_VIRGINIA) -> list[Place]:
    """Every ZIP, county, town and state named in the message, in the order they appear (see the module), read
    for ``home`` (the deployment's home states: their counties and towns)."""
    reading = _Reading(message, home)
    reading.zips()
    reading.states_named()  # before towns: "North Carolina" is a state, not the WV town Carolina
    reading.counties()
    reading.hyphenated_counties()
    reading.towns()
    reading.state_abbreviations()
    reading.misspelt_counties()
    reading.misspelt_names()
    reading.lower_case_names()
    places = [p for _, p in sorted(reading.found, key=lambda item: item[0])]
    return _in_other_state(places, home.states)


class _Reading:
    """One message read for places, step by step (``find_places``): each step records the places it finds, with
    where they start, and the spans they take, which later steps leave alone."""

    def __init__(self, message: str, home: Home) -> None:
        self.message = message
        self.home = home
        self.states = home.states
        self.found: list[tuple[int, Place]] = []
        self.taken: list[tuple[int, int]] = []

    def free(self, start: int, end: int) -> bool:
        """Whether no place found so far overlaps start..end."""
        return all(end <= s or start >= e for s, e in self.taken)

    def record(self, start: int, span: tuple[int, int], place: Place) -> None:
        """Record ``place``, starting at ``start`` and taking ``span``."""
        self.found.append((start, place))
        self.taken.append(span)

    def qualify(self, place: Place, start: int, end: int) -> None:
        """Record ``place`` (spanning start..end), in the state written right after it when one is."""
        qualifier = _qualifier(self.message, end)
        if qualifier is not None:
            text, q_start, q_end = qualifier
            state = _state_of(text) or place.state
            if state != place.state:
                place = _elsewhere(place, state, text)
            if self.free(q_start, q_end):
                self.record(q_start, (q_start, q_end), Place("state", text, None, state, home=self.states))
        self.record(start, (start, end), place)

    def county_place(self, text: str, found_county: tuple[str, str], corrected_from: str | None = None) -> Place:
        """The home county ``found_county`` (state, county), as written ``text``."""
        state, county = found_county
        return Place("county", text, county, state, (county,), corrected_from=corrected_from, home=self.states)

    def town_place(self, text: str, key: str, corrected_from: str | None = None) -> Place:
        """The home town ``key`` (lower case), as written ``text``."""
        state, counties = _towns(self.states)[key]
        return Place("town", text, counties[0], state, counties, corrected_from=corrected_from, home=self.states)

    def zips(self) -> None:
        """ZIP codes: known ones, and five digits written as a ZIP that is none ("zip 99999": state unknown)."""
        message = self.message
        for m in ZIP_PATTERN.finditer(message):
            place = zip_place(m.group(1), self.home)
            if place is None and re.search(r"\b(?:zip(?: code)?|in|near|around)\s*$", message[: m.start()], re.I):
                place = Place("zip", m.group(1), None, "", home=self.states)  # a ZIP code that does not exist
            if place is not None:
                self.record(m.start(), m.span(), place)

    def states_named(self) -> None:
        """States by name or dotted abbreviation ("North Carolina", "W. Va."; "Washington" only as the state)."""
        message = self.message
        for m in _state_pattern().finditer(message):
            if not self.free(*m.span()):
                continue
            text = m.group(1)
            key = text.lower()
            if key == "virginia" and message[max(0, m.start() - 5) : m.start()].lower() == "west ":
                continue
            if key == "washington" and not re.match(r"\s*(?:state|dc|d\.c\.)\b", message[m.end() :], re.I):
                continue  # a name, a street or a county far more often than the state
            state = _state_of(text)
            if state:
                self.record(m.start(), m.span(), Place("state", text, None, state, home=self.states))

    def counties(self) -> None:
        """Home counties by name: with "County" in any case, else capitalised and not an ordinary word (names of
        several words in any case), and not part of a longer town's name."""
        message, states = self.message, self.states
        town_spans = [m.span() for m in _town_pattern(states).finditer(message)]
        for m in _county_pattern(states).finditer(message):
            name, suffix = m.group(1), m.group(2)
            if not self.free(*m.span()):
                continue
            several_words = bool(re.search(r"[\s-]", name))  # "Palm Beach", "miami-dade": any case, like towns
            if not suffix and not several_words and (_ambiguous(name, states) or not name[0].isupper()):
                continue
            if not suffix and any(s <= m.start() and m.end() <= e and e - s > len(name) for s, e in town_spans):
                continue  # part of a longer town's name: "West Palm Beach" is a town, not Palm Beach County
            county = _county_of(name, states)
            if county:
                self.qualify(self.county_place(m.group(0), county), *m.span())

    def hyphenated_counties(self) -> None:
        """Misspelt hyphenated home counties ("Miami-Dad")."""
        states = self.states
        for m in HYPHENATED.finditer(self.message):
            if self.free(*m.span()) and any("-" in c for c in _county_choices(states)):
                close = _closest(m.group(1), [c for c in _county_choices(states) if "-" in c])
                if close:
                    place = self.county_place(f"{close.title()} County", _chosen_county(close, states), m.group(1))
                    self.qualify(place, *m.span())

    def towns(self) -> None:
        """Home towns by name: several words in any case; one word capitalised (or lower case after "in / near /
        ..." when big: ``_lower_town``), not an ordinary word, and as the first word only a gazetteer town;
        "Mt Hope" as "Mount Hope"."""
        message, states = self.message, self.states
        for m in _town_pattern(states).finditer(message):
            text = m.group(1)
            if not self.free(*m.span()):
                continue
            first_word = not message[: m.start()].strip()
            if " " not in text and (
                (not text[0].isupper() and not _lower_town(message, m.start(), text, states))
                or _ambiguous(text, states)
                or (first_word and not any(places_named(text, s) for s in states))  # a first word: a gazetteer town
            ):
                continue
            key = text.lower()
            canonical = re.sub(r"^mt\.?\s+", "mount ", key).title() if key.startswith("mt") else None
            place = self.town_place(canonical, key, corrected_from=text) if canonical else self.town_place(text, key)
            self.qualify(place, *m.span())

    def state_abbreviations(self) -> None:
        """Other states' postal abbreviations on their own, in capitals and not words ("SNAP in NC")."""
        message = self.message
        for m in re.finditer(r"(?<![A-Za-z])([A-Z]{2})(?![A-Za-z])", message):
            if self.free(*m.span()) and not message.isupper() and m.group(1).lower() not in WORD_ABBREVIATIONS:
                state = _abbreviations().get(m.group(1).lower())
                if state and state != "WV" and m.group(1) not in ("ZIP",):
                    self.record(m.start(), m.span(), Place("state", m.group(1), None, state, home=self.states))

    def misspelt_counties(self) -> None:
        """Misspelt home counties written with the word County ("Fayete County"): the last words that are close
        to one, unless they name one as written."""
        states = self.states
        home_keys = set(_home_counties(states))
        for m in COUNTY_PHRASE.finditer(self.message):
            if not self.free(*m.span()):
                continue
            words = m.group(1).split()
            for n in range(len(words)):
                word = " ".join(words[n:])
                if " ".join(county_key(word).split()) in home_keys:
                    break
                close = _closest(word, _county_choices(states))
                if close:
                    county = _chosen_county(close, states)
                    start = m.start(1) + len(" ".join(words[:n])) + (1 if n else 0)
                    self.qualify(self.county_place(f"{county[1]} County", county, corrected_from=word), start, m.end())
                    break

    def misspelt_names(self) -> None:
        """Capitalised names after "in / near / ..." or before a home state ("in Beckly", "Sofia WV"): a misspelt
        home county or town, else (after a preposition) a big enough city elsewhere ("SNAP office in Columbus")."""
        message, states = self.message, self.states
        for pattern in (PREPOSITION_NAME, _name_before_home(states)):
            for m in pattern.finditer(message):
                name = m.group(1)
                if not self.free(*m.span(1)) or _state_of(name) or name.lower() in AMBIGUOUS_NAMES:
                    continue
                close = _closest(name, _county_choices(states)) or _closest(name, _town_choices(states))
                if close and (county := _county_of(close, states)):
                    self.qualify(self.county_place(f"{county[1]} County", county, corrected_from=name), *m.span(1))
                elif close:
                    self.qualify(self.town_place(close.title(), close, corrected_from=name), *m.span(1))
                elif pattern is PREPOSITION_NAME:
                    self.city_elsewhere(name, m)

    def city_elsewhere(self, name: str, m: re.Match[str]) -> None:
        """A name after a preposition that is no home place: a city of another state, when big enough or in the
        state written after it ("Beckley, WV" for a Florida home)."""
        qualifier = _qualifier(self.message, m.end(1))
        written = _state_of(qualifier[0]) if qualifier else None
        elsewhere = [
            p
            for p in places_named(name)
            if p.state not in self.states and (p.population >= MIN_CITY_ELSEWHERE or p.state == written)
        ]
        if elsewhere:
            self.qualify(Place("town", name, None, elsewhere[0].state, (), home=self.states), *m.span(1))

    def lower_case_names(self) -> None:
        """Lower-case words after "in / near / ..." ("wic in hialeh", "food in browrd"): a home county, or a home
        town of LOWER_TOWN_POPULATION people or more, by name or close misspelling (the name, else its first word)."""
        states = self.states
        for m in PREPOSITION_LOWER.finditer(self.message):
            name = m.group(1)
            if not self.free(*m.span(1)) or _state_of(name) or name in AMBIGUOUS_NAMES or name in ENGLISH_WORDS:
                continue
            for words in (name, name.split()[0]):
                if words in AMBIGUOUS_NAMES or words in LOWER_WORDS or (words != name and len(words) < 5):
                    continue
                span = (m.start(1), m.start(1) + len(words))
                close = _closest(words, _county_choices(states))
                typo = words if close != words else None
                if close:
                    county = _chosen_county(close, states)
                    self.qualify(self.county_place(f"{county[1]} County", county, typo), *span)
                    break
                close = _closest(words, _big_town_choices(states))
                if close:
                    place = self.town_place(close.title(), close, corrected_from=words if close != words else None)
                    self.qualify(place, *span)
                    break


def _in_other_state(places: list[Place], states: tuple[str, ...]) -> list[Place]:
    """One other state named, no home state: a home name that state also has is that state's place ("SNAP in
    Raleigh? I live in North Carolina")."""
    named_states = {p.state for p in places if p.kind == "state"}
    other = named_states - set(states)
    if len(other) == 1 and not named_states & set(states):
        (state,) = other
        places = [
            _elsewhere(p, state, None)
            if p.kind in ("county", "town") and p.state in states and p.qualified_by is None and _exists_in(p, state)
            else p
            for p in places
        ]
    return places


def _lower_town(message: str, start: int, text: str, states: tuple[str, ...]) -> bool:
    """Whether a one-word home town written in lower case is meant as the town: right after "in / near / around /
    at / from", and a town of LOWER_TOWN_POPULATION people or more ("wic in hialeah")."""
    return bool(re.search(r"\b(?:in|near|around|at|from)\s+$", message[:start], re.IGNORECASE)) and (
        _population(text, states) >= LOWER_TOWN_POPULATION
    )
