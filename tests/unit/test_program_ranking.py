"""The order programs are offered in (livemem.answer.evidence.rank_programs) on registry rows and places far from
the bundled example (Morgantown, Fairmont, Charleston): need, population, town, ZIP coverage, gazetteer distance.
No model, no index."""

from __future__ import annotations

from datetime import datetime

import pytest

from livemem.answer.evidence import eligible_counties, excludes, find_program, rank_programs, row_town, street
from livemem.answer.routing import ContextRequest, self_query

NOW = datetime(2026, 11, 26)


def row(rid, rtype, town, zip_code, county, **extra):
    return {"local_resource_id": rid, "name": extra.pop("name", rid), "resource_type": rtype, "county": county,
            "zip": zip_code, "zip_coverage": extra.pop("coverage", []),
            "address": f"1 Main Street, {town}, WV {zip_code}", **extra}  # fmt: skip


def place(eid, kind, town, zip_code, **extra):
    return {"entity_id": eid, "label": extra.pop("label", eid), "type": kind, "town": town, "zip": zip_code,
            "programs": extra.pop("programs", ""), "description": extra.pop("description", ""), **extra}  # fmt: skip


def order(message, registry=(), spatial=(), **request):
    sq = self_query(ContextRequest(message, **request), [], NOW)
    return [p["id"] for p in rank_programs({"registry": list(registry), "spatial": list(spatial)}, sq, message)]


def test_the_town_asked_about_comes_first_then_the_nearest():
    rows = [
        row("charleston-pantry", "food_pantry", "Charleston", "25301", "Kanawha"),
        row("fairmont-pantry", "food_pantry", "Fairmont", "26554", "Marion"),
        row("morgantown-pantry", "food_pantry", "Morgantown", "26505", "Monongalia"),
    ]
    assert order("food pantry in Morgantown", rows) == ["morgantown-pantry", "fairmont-pantry", "charleston-pantry"]
    assert order("food pantry in Charleston", rows)[0] == "charleston-pantry"


def test_the_need_named_comes_before_the_town_and_several_needs_take_turns():
    rows = [
        row("mo-clinic", "healthcare", "Morgantown", "26505", "Monongalia"),
        row("mo-snap", "snap", "Morgantown", "26505", "Monongalia"),
        row("fa-wic", "wic", "Fairmont", "26554", "Marion"),
        row("mo-snap-2", "snap", "Morgantown", "26505", "Monongalia"),
        row("mo-wic", "wic", "Morgantown", "26505", "Monongalia"),
    ]
    assert order("WIC office in Fairmont", rows)[:2] == ["fa-wic", "mo-wic"]
    # "SNAP and WIC": the best of each, then the second of each; the clinic (no need) last
    assert order("SNAP and WIC in Morgantown", rows) == ["mo-snap", "mo-wic", "mo-snap-2", "fa-wic", "mo-clinic"]


def test_a_zip_covered_beats_one_that_is_not_and_a_registry_row_beats_a_place_on_a_tie():
    rows = [
        row("far", "snap", "Fairmont", "26554", "Marion"),
        row("covers", "snap", "Fairmont", "26554", "Marion", coverage=["26505"]),
    ]
    places = [place("hub", "benefits_office", "Fairmont", "26554", programs="SNAP; Medicaid")]
    assert order("SNAP", rows, places, zip="26505") == ["covers", "far", "hub"]


def test_a_population_named_puts_the_programs_that_serve_it_first():
    rows = [
        row("snap", "snap", "Beckley", "25801", "Raleigh"),
        row("holiday", "seasonal_assistance", "Beckley", "25801", "Raleigh", eligibility="Families with children"),
    ]
    assert order("help for a family with kids in Beckley", rows)[0] == "holiday"


def test_places_answer_a_need_by_their_type_programs_or_description():
    places = [
        place("church", "food_pantry", "Morgantown", "26505", label="Wesley Church Pantry"),
        place("office", "benefits_office", "Morgantown", "26505", programs="SNAP; Medicaid"),
        place("museum", "museum", "Morgantown", "26505"),
    ]
    assert order("groceries in Morgantown", spatial=places)[0] == "church"
    assert order("food stamps in Morgantown", spatial=places)[0] == "office"


def test_towns_streets_and_program_names_are_read_as_people_write_them():
    assert row_town({"address": "12 Church Street, Fayetteville, WV 25840"}) == "Fayetteville"
    assert row_town({"address": "PO Box 9", "zip": "26505"}) == "Morgantown"
    assert street("45 Court Street, Fayetteville") == street("45 court st.") == "45 ct st"
    rows = [{"name": "Fayette LIEAP Intake – Community Action"}, {"name": "Raleigh LIEAP Intake – Beckley"}]
    assert find_program(rows, "the Fayette LIEAP intake")["name"].startswith("Fayette")
    assert find_program(rows, "a pantry") is None
    clinics = [{"name": "Fayette WIC Clinic – Oak Hill"}, {"name": "New River Health – Oak Hill Clinic"}]
    assert find_program(clinics, "the Oak Hill clinic")["name"] == "New River Health – Oak Hill Clinic"  # in order
    assert find_program(clinics, "the clinic in Oak Hill")["name"] == "Fayette WIC Clinic – Oak Hill"  # in order too


@pytest.mark.parametrize(
    ("eligibility", "counties"),
    [
        ("Fayette County residents; bring a photo ID.", {"fayette"}),
        ("Low-income residents of Fayette County.", {"fayette"}),
        ("Fayette and Raleigh County residents", {"fayette", "raleigh"}),
        ("Low-income Palm Beach County residents", {"palm beach"}),  # the county, not "low-income palm beach"
        ("South Palm Beach County residents", {"palm beach"}),
        ("Miami-Dade County residents only", {"miami-dade"}),
        ("Open to all.", set()),
        ("Narnia County residents", set()),  # no county: no limit
    ],
)
def test_the_counties_an_eligibility_limits_a_program_to(eligibility, counties):
    assert eligible_counties(eligibility) == counties
    if counties:
        assert excludes({"eligibility": eligibility}, ["Kanawha"])
        assert not excludes({"eligibility": eligibility}, [next(iter(counties)).title()])
    assert not excludes({"eligibility": eligibility}, [])  # the person named no county


def test_a_spanish_wic_clinic_is_a_wic_question():
    """ "la clínica WIC" names a WIC clinic, as "the WIC clinic" does (not the primary-care clinic first)."""
    from livemem.answer.routing import resource_types

    assert resource_types("¿Está abierta la clínica WIC de Oak Hill el lunes?")[0] == "wic"
    assert resource_types("¿Hay una clínica de WIC en Beckley?")[0] == "wic"
    assert resource_types("Is there a WIC clinic in Lewisburg?")[0] == "wic"
    assert resource_types("necesito una clínica en Beckley") == ["healthcare"]
