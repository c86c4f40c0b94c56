"""The one vocabulary of needs (livemem.registry.needs): every registry type has taxonomy terms and English and
Spanish plain words, routing and the taxonomy both read it, and they agree (a taxonomy term's name, said by a
resident, routes to the type the taxonomy gives it)."""

from __future__ import annotations

import re

import pytest

from livemem.answer.routing import RESOURCE_PATTERNS, RESOURCE_TYPES, resource_types
from livemem.registry import RESOURCE_TYPES as REGISTRY_TYPES
from livemem.registry.needs import BY_TYPE, NAME_ORDER, NEEDS
from livemem.registry.taxonomy import CODE_PREFIXES, NAME_RULES, OPEN_ELIGIBILITY, code_types, name_types

PLAIN = re.compile(r"[\w' ,&-]+")  # an alternative written as plain words, without regular-expression syntax


def test_every_registry_type_has_one_need_with_english_spanish_and_taxonomy_terms() -> None:
    assert [n.type for n in NEEDS] == list(BY_TYPE) and len(BY_TYPE) == len(NEEDS)
    assert set(BY_TYPE) == set(REGISTRY_TYPES) - {"other"}
    assert sorted(NAME_ORDER) == sorted(BY_TYPE)
    for need in NEEDS:
        assert need.english and need.spanish, need.type
        assert need.term_names and need.terms, need.type
        for word in (*need.english, *need.spanish, *need.term_names):
            re.compile(word)


def test_routing_and_the_taxonomy_read_the_vocabulary() -> None:
    assert list(RESOURCE_TYPES) == [n.type for n in NEEDS]
    assert all(RESOURCE_TYPES[n.type] == "|".join((*n.english, *n.spanish)) for n in NEEDS)
    assert {code: (n.type,) for n in NEEDS for code in n.airs} == CODE_PREFIXES
    assert {c: (n.type,) for n in NEEDS for c in n.open_eligibility} == OPEN_ELIGIBILITY
    assert [types for _, types in NAME_RULES] == [(t,) for t in NAME_ORDER]


@pytest.mark.parametrize("need", NEEDS, ids=lambda n: n.type)
def test_plain_words_route_to_their_need(need) -> None:
    for word in (*need.english, *need.spanish):
        if PLAIN.fullmatch(word):
            assert need.type in resource_types(f"I need {word} near Beckley"), (need.type, word)
            assert RESOURCE_PATTERNS[need.type].fullmatch(word), (need.type, word)


@pytest.mark.parametrize("need", NEEDS, ids=lambda n: n.type)
def test_taxonomy_and_routing_agree_on_each_types_terms(need) -> None:
    for code in need.airs:  # a code of the type, and a code under it
        assert code_types(code) == code_types(f"{code}.1000" if "-" in code else f"{code}-1000") == (need.type,)
    for category in need.open_eligibility:
        assert name_types(category.title()) == (need.type,)
    for term in need.terms:  # a term's name: the taxonomy types it so, and a resident saying it asks for that need
        assert need.type in name_types(term), (need.type, term)
        assert need.type in resource_types(term), (need.type, term)


def test_needs_in_english_and_spanish_several_in_one_message() -> None:
    assert resource_types("no heat and we got evicted, and the kids are hungry") == [
        "utility_assistance", "housing", "food_pantry"]  # fmt: skip
    assert resource_types("necesito cupones de alimentos y un refugio") == ["snap", "housing"]
    assert resource_types("servicios para personas mayores y clases de inglés") == ["senior_services", "education"]
    assert name_types("Senior Transportation") == ("senior_services", "transportation")  # NAME_ORDER: senior first
