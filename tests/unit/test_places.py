"""Places as a person means them (livemem.geo.places, livemem.geo.gazetteer) and needs as people write them
(livemem.answer.routing): no model, no index; the gazetteer and ZIP data are the packages'."""

from __future__ import annotations

import pytest

from livemem.answer.routing import ContextRequest, resource_types, self_query
from livemem.geo.gazetteer import wv_towns, zip_counties
from livemem.geo.places import find_places


def places(message: str) -> list[tuple[str, str, str, tuple[str, ...]]]:
    return [(p.kind, p.name, p.state, p.counties) for p in find_places(message)]


@pytest.mark.parametrize(
    ("message", "state", "name"),
    [
        ("SNAP office in Raleigh, North Carolina", "NC", "Raleigh, NC"),
        ("Is there WIC in Raleigh, NC?", "NC", "Raleigh, NC"),
        ("What about Raleigh N.C.?", "NC", "Raleigh, NC"),
        ("WIC in Fayette County, Pennsylvania", "PA", "Fayette County, PA"),
        ("heating bill help in Fayette County, Ohio", "OH", "Fayette County, OH"),
        ("Where is WIC in Washington County, MD", "MD", "Washington County, MD"),
        ("SNAP in Columbus, Ohio", "OH", "Columbus, OH"),
        ("benefits in Oak Hill, VA", "VA", "Oak Hill, VA"),
        ("food in Fayetteville, NC", "NC", "Fayetteville, NC"),
        # one other state named and West Virginia not: the name is that state's place
        ("SNAP in Raleigh? I live in North Carolina", "NC", "Raleigh, NC"),
        # a big city elsewhere, named alone after "in"
        ("SNAP office in Columbus", "OH", "Columbus, OH"),
    ],
)
def test_a_place_qualified_by_another_state_is_never_west_virginia(message, state, name):
    found = find_places(message)
    first = next(p for p in found if p.kind != "state")
    assert (first.state, first.name, first.counties) == (state, name, ())
    sq = self_query(ContextRequest(message), [], __import__("datetime").datetime(2026, 11, 26))
    assert sq.counties == []  # no West Virginia county filter


@pytest.mark.parametrize(
    ("message", "counties"),
    [
        ("Is there a food pantry in Mount Hope?", ("Fayette",)),  # ZIP 25880 is filed under Raleigh
        ("food pantry in Mt Hope WV", ("Fayette",)),
        ("Mt. Hope food pantry", ("Fayette",)),
        ("clinics near Oak Hill", ("Fayette",)),
        ("Beckley food pantry hours", ("Raleigh",)),  # a gazetteer town as the first word
        ("help in Montgomery", ("Kanawha", "Fayette")),  # the county line runs through the town
        ("Meadow Bridge food pantry", ("Fayette", "Summers")),  # not in the gazetteer: every county of its ZIPs
        ("benefits in Fayette county, West Virginia", ("Fayette",)),
    ],
)
def test_west_virginia_towns_take_their_county_from_the_gazetteer(message, counties):
    found = [p for p in find_places(message) if p.kind != "state"]
    assert found[0].state == "WV"
    assert found[0].counties == counties


def test_a_zip_spanning_counties_keeps_all_of_them():
    assert zip_counties("25880") == ("Fayette", "Raleigh")  # Mount Hope: its town in Fayette, filed under Raleigh
    assert zip_counties("25901") == ("Fayette",)
    sq = self_query(ContextRequest("food pantry near 25880"), [], __import__("datetime").datetime(2026, 11, 26))
    assert sq.counties == ["Fayette", "Raleigh"]
    assert sq.named_counties == []  # one place, not two counties to choose between


@pytest.mark.parametrize(
    ("message", "kind", "name", "wrote"),
    [
        ("food pantry in Fayete County", "county", "Fayette County", "Fayete"),
        ("WIC in Beckly", "town", "Beckley", "Beckly"),
        ("food pantry in Sofia WV", "town", "Sophia", "Sofia"),
        ("Oakhill WV medicaid office", "town", "Oak Hill", "Oakhill"),
        ("winter coats in Montgomry WV", "town", "Montgomery", "Montgomry"),
    ],
)
def test_misspelt_places_are_corrected_and_say_so(message, kind, name, wrote):
    place = next(p for p in find_places(message) if p.kind != "state")
    assert (place.kind, place.name, place.corrected_from) == (kind, name, wrote)


def test_words_that_look_like_places_are_not_places():
    # "OR" between two counties is a conjunction, not Oregon; "Carolina" in "North Carolina" is no WV town
    assert places("rides in Raleigh County OR Fayette") == [
        ("county", "Raleigh County", "WV", ("Raleigh",)),
        ("county", "Fayette", "WV", ("Fayette",)),
    ]
    assert [p.state for p in find_places("I moved here from North Carolina")] == ["NC"]
    assert find_places("Is it ok to apply in person?") == []
    assert find_places("Hope you can help me") == []


def test_a_zip_that_does_not_exist_is_reported_not_guessed():
    (place,) = find_places("food pantry in ZIP 99999")
    assert (place.kind, place.text, place.state) == ("zip", "99999", "")
    sq = self_query(ContextRequest("food pantry in ZIP 99999"), [], __import__("datetime").datetime(2026, 11, 26))
    assert sq.invalid_zips == ["99999"] and sq.counties == []


def test_the_gazetteer_covers_small_towns_and_spells_mount_both_ways():
    towns = wv_towns()
    assert len(towns) > 1000
    assert towns["mount hope"] == towns["mt hope"] == towns["mt. hope"] == ("Fayette",)
    assert towns["gauley bridge"] == ("Fayette",)


@pytest.mark.parametrize(
    ("message", "types"),
    [
        ("where do I apply for food stamps", ["snap"]),
        ("clinics near Oak Hill", ["healthcare"]),
        ("I need a doctor", ["healthcare"]),
        ("help with my electric bill", ["utility_assistance"]),
        ("free winter coats for my kids", ["seasonal_assistance"]),
        ("I need a shelter tonight", ["housing"]),
        ("SNAP and WIC in Oak Hill", ["snap", "wic"]),  # in the order the message names them
        ("baby formula", ["wic"]),
        ("I am in Sofia WV and need food", ["food_pantry", "snap"]),  # the same words: the direct help first
        ("we have nowhere to stay, Raleigh County", ["housing"]),
        ("my landlord kicked us out", ["housing"]),
        ("my tooth hurts", ["healthcare"]),
        ("me van a cortar la luz en Fayetteville", ["utility_assistance"]),
        ("abrigos de invierno gratis en Montgomery", ["seasonal_assistance"]),
    ],
)
def test_needs_with_synonyms_and_plurals(message, types):
    assert resource_types(message) == types


def test_benefits_in_general_and_populations_steer_the_program_types():
    now = __import__("datetime").datetime(2026, 11, 26)
    general = self_query(ContextRequest("Oak Hill WV county benefits"), [], now)
    assert general.steered_types() == ["snap", "medicaid", "wic", "utility_assistance"]
    pregnant = self_query(ContextRequest("I'm pregnant and need help buying healthy food"), [], now)
    assert pregnant.steered_types()[0] == "wic"
