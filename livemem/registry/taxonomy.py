"""Taxonomy terms → the registry's resource types (the plain-word needs a resident asks about).

211s file services under the AIRS/211 LA County taxonomy (codes such as ``BD-1800.2000``, names such as "Food
Pantries"), sometimes under Open Eligibility (top-level categories "Food", "Housing", ...), or under their own
names. A service's terms map onto ``RESOURCE_TYPES`` (``livemem.registry.fields``) by three tables, all data:

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

# AIRS/211 code prefix -> types. Top-level: B basic needs, D consumer services, F criminal justice and legal, H
# education, L health care, N income support and employment, P individual and family life, R mental health and
# substance use, T organisational / community, Y target populations (Y says who, not what: names decide).
CODE_PREFIXES: dict[str, tuple[str, ...]] = {
    "BD": ("food_pantry",),  # Food (BD-1800 emergency food, BD-5000 meals)
    "BH": ("housing",),  # Housing/Shelter (BH-1800 emergency shelter, BH-3800 housing expense assistance)
    "BM": ("seasonal_assistance",),  # Material Goods (clothing, household goods, holiday gifts, school supplies)
    "BT": ("transportation",),  # Transportation
    "BV": ("utility_assistance",),  # Utilities (BV-8900 utility service payment assistance)
    "FT": ("legal_aid",),  # Legal Services
    "H": ("education",),  # Education
    "L": ("healthcare",),  # Health Care
    "ND": ("employment",),  # Employment
    "PH-1250": ("childcare",),  # child care
    "R": ("behavioral_health",),  # Mental Health and Substance Use Disorder Services
}

# (pattern on the lower-cased name, types), all that match apply.
NAME_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"food stamps?|\bsnap\b|supplemental nutrition assistance|\bebt\b", ("snap",)),
    (r"\bwic\b|women,? infants,? (?:and|&) children", ("wic",)),
    (r"medicaid|\bchip\b|children'?s health insurance|health insurance", ("medicaid",)),
    (
        r"utilit|electric|\bgas (?:service|bill)|water (?:service|bill)|heating|\bliheap\b|\blieap\b|energy assist",
        ("utility_assistance",),
    ),
    (
        r"\bfood\b(?! stamps?)|pantr|\bmeals?\b|soup kitchen|groceri|nutrition (?:site|program)|brown bag",
        ("food_pantry",),
    ),
    (r"home delivered meals|meals on wheels|senior|older adult|\baging\b|elder|retire", ("senior_services",)),
    (r"shelter|homeless|\brent\b|rental|housing|eviction|weatheriz|transitional living", ("housing",)),
    (
        r"clinic|health care|healthcare|medical|dental|pharmac|prescription|primary care|hospital|immuniz",
        ("healthcare",),
    ),
    (
        r"mental health|counsel|substance|addiction|alcohol|\bdrug|detox|crisis (?:intervention|line)|suicide"
        r"|behavioral|psychiatr",
        ("behavioral_health",),
    ),
    (r"transport|\brides?\b|\bbus\b|transit|paratransit|gas money", ("transportation",)),
    (r"child ?care|day ?care|pre-?school|head start|after ?school", ("childcare",)),
    (r"employment|\bjobs?\b|job training|vocational|workforce|career", ("employment",)),
    (r"legal|attorney|lawyer|court|tenant rights", ("legal_aid",)),
    (r"disabilit|disabled|wheelchair|\bdeaf\b|\bblind", ("disability_services",)),
    (r"\bged\b|adult education|literacy|\besl\b|english as a second|tutor|high school equivalen", ("education",)),
    (
        r"clothing|coats?\b|holiday|christmas|school supplies|cooling center|thanksgiving|furniture",
        ("seasonal_assistance",),
    ),
)

# Open Eligibility top-level categories (lower case) -> types; Emergency, Money and Care say too little: names decide.
OPEN_ELIGIBILITY: dict[str, tuple[str, ...]] = {
    "food": ("food_pantry",),
    "housing": ("housing",),
    "goods": ("seasonal_assistance",),
    "transit": ("transportation",),
    "health": ("healthcare",),
    "education": ("education",),
    "work": ("employment",),
    "legal": ("legal_aid",),
}

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
    return bool(text) and bool(AIRS_CODE.match(text.strip().upper()))
