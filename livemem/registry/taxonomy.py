"""Taxonomy terms → the registry's resource types (the plain-word needs a resident asks about).

211s file services under the AIRS/211 LA County taxonomy (codes such as ``BD-1800.2000``, names such as "Food
Pantries"), sometimes under Open Eligibility (top-level categories "Food", "Housing", ...), or under their own
names. A service's terms map onto ``RESOURCE_TYPES`` (``livemem.registry.fields``) by three tables, all data of
the one vocabulary of needs (``livemem.registry.needs``, which routing reads its plain words from too):

- ``CODE_PREFIXES``: an AIRS code or code prefix → types; the longest prefix that matches wins (``BV-8900.1800``
  "Electric Service Payment Assistance" is under ``BV`` utilities). Only codes of the taxonomy's published
  structure are listed (its top-level sections and a few well-known second levels); where a code's place was not
  certain, the term's *name* decides instead.
- ``NAME_RULES``: keyword patterns on the term's name (and on the taxonomy's own words: "Food Stamps/SNAP",
  "Homeless Shelter", "General Legal Aid", "Rent Payment Assistance"), for terms without a code or with a code the
  prefixes do not type, and for what the code alone does not say (home-delivered meals are food *and* senior
  services).
- ``OPEN_ELIGIBILITY``: the Open Eligibility top-level categories.

A term may give several types and a service has the union of its terms' types, first term first (the first is the
row's ``resource_type``). Terms that give none are "unmapped": the import report counts them by name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

from livemem.registry.needs import BY_TYPE, NAME_ORDER, NEEDS

# The three tables, read from the one vocabulary of needs (livemem.registry.needs), where each type's codes,
# categories and name keywords are written with its plain words.
# AIRS/211 code prefix -> types (the sections are listed in livemem.registry.needs).
CODE_PREFIXES: dict[str, tuple[str, ...]] = {code: (n.type,) for n in NEEDS for code in n.airs}

# (pattern on the lower-cased name, types), all that match apply, in NAME_ORDER.
NAME_RULES: tuple[tuple[str, tuple[str, ...]], ...] = tuple(
    (pattern, (t,)) for t in NAME_ORDER for pattern in BY_TYPE[t].term_names
)

# Open Eligibility top-level categories (lower case) -> types; Emergency, Money and Care say too little: names decide.
OPEN_ELIGIBILITY: dict[str, tuple[str, ...]] = {c: (n.type,) for n in NEEDS for c in n.open_eligibility}

AIRS_CODE = re.compile(r"^[A-Z]{1,2}(?:-\d{4}(?:\.\d{4}(?:-\d{3}(?:\.\d{2})?)?)?)?$")


@cache
def _name_patterns() -> tuple[tuple[re.Pattern[str], tuple[str, ...]], ...]:
    return tuple((re.compile(p), types) for p, types in NAME_RULES)


def code_types(code: str | None) -> tuple[str, ...]:
    """The types of an AIRS code by its longest listed prefix (``BD-1800.2000`` → food_pantry); () when none."""
    if not code or not is_airs_code(code):
        return ()
    code = code.strip().upper()
    for cut in range(len(code), 0, -1):
        prefix = code[:cut]
        # a prefix ends where a level of the code ends: a section letter (L of LN), a "-" or a "."
        if prefix in CODE_PREFIXES and (cut == len(code) or code[cut] in "-." or (cut == 1 and code[1].isalpha())):
            return CODE_PREFIXES[prefix]
    return ()


def name_types(name: str | None) -> tuple[str, ...]:
    """The types a term's name gives (keywords of ``NAME_RULES``, or an Open Eligibility category)."""
    if not name:
        return ()
    text = " ".join(name.lower().split())
    if text in OPEN_ELIGIBILITY:
        return OPEN_ELIGIBILITY[text]
    found: list[str] = []
    for pattern, types in _name_patterns():
        if pattern.search(text):
            found += [t for t in types if t not in found]
    if "snap" in found and "food_pantry" in found and not re.search(r"pantr|meal|kitchen", text):
        found.remove("food_pantry")  # "Food Stamps/SNAP" is not a pantry
    return tuple(found)


@cache
def term_types(code: str | None, name: str | None) -> tuple[str, ...]:
    """The types of one taxonomy term: its code's, then what its name adds."""
    out = list(code_types(code))
    out += [t for t in name_types(name) if t not in out]
    return tuple(out)


def types_of_terms(terms: Iterable[Mapping[str, Any]]) -> list[str]:
    """The union of the terms' types (each term: ``code`` / ``name``), first term first; [] when none maps."""
    out: list[str] = []
    for term in terms:
        out += [t for t in term_types(term.get("code"), term.get("name")) if t not in out]
    return out


def is_airs_code(text: str | None) -> bool:
    """Whether a term id or code looks like an AIRS code (``BD-1800.2000``)."""
    if not text:
        return False
    return bool(AIRS_CODE.match(text.strip().upper()))
