"""The deployment's home (livemem.geo.home, livemem.sources.home; docs/home.md): where it comes from (the sources
file's home:, else the registry's state(s), else West Virginia), how a version records it, and what follows from
it: county and town names of the home states with their typos, scope, the out-of-state redirect and its wording.
No model, no index: the gazetteer and ZIP data are the packages'."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from livemem.answer.chat import canned_answer, home_heading
from livemem.answer.conversation import carry, from_history
from livemem.answer.routing import Caller, ContextRequest, home_scope, out_of_state, self_query
from livemem.errors import ConfigError
from livemem.geo.home import WEST_VIRGINIA, Home, home_of
from livemem.geo.places import STATE, county_name, find_places, zip_place
from livemem.settings import ContextSettings
from livemem.sources.config import load_sources
from livemem.sources.home import home_from_sources

FL = Home(("FL",), "South Florida 211")
NOW = datetime(2026, 11, 26)
SOURCES = "version: 1\nsources:\n  - {name: docs, repo: ., collection: docs}\n"


def home_of_file(tmp_path: Path, extra: str) -> Home:
    path = tmp_path / "sources.yaml"
    path.write_text(SOURCES + extra, encoding="utf-8")
    return home_from_sources(load_sources(path))


# --- where the home comes from ---------------------------------------------------------------------------------------
def test_no_home_and_no_registry_is_west_virginia(tmp_path: Path) -> None:
    home = home_of_file(tmp_path, "")
    assert home == WEST_VIRGINIA == Home() and home.states == ("WV",) and STATE == "WV"
    assert (home.name, home.state_names, home.label) == ("Living Memory", "West Virginia", "WV")


def test_the_registry_state_or_states_are_the_home_when_no_home_is_named(tmp_path: Path) -> None:
    registry = "registry: {kind: csv, path: r.csv, state: FL}\n"
    assert home_of_file(tmp_path, registry) == Home(("FL",))
    several = "registry: {kind: csv, path: r.csv, states: [FL, GA]}\n"
    assert home_of_file(tmp_path, several).states == ("FL", "GA")


def test_an_explicit_home_wins_over_the_registry(tmp_path: Path) -> None:
    home = home_of_file(
        tmp_path,
        "home:\n  states: [FL]\n  name: South Florida 211\n  crisis_lines: [{name: Switchboard, phone: '211'}]\n"
        "registry: {kind: csv, path: r.csv, state: WV}\n",
    )
    assert home == Home(("FL",), "South Florida 211", (("Switchboard", "211"),))
    assert home_of(home.to_manifest()) == home  # the manifest section reads back the same


def test_several_home_states(tmp_path: Path) -> None:
    home = home_of_file(tmp_path, "home: {states: [WV, VA], name: Two Virginias 211}\n")
    assert home.states == ("WV", "VA") and home.state_names == "West Virginia and Virginia"
    assert home.covers("VA") and not home.covers("FL")


def test_a_mistake_in_the_home_section_names_its_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"sources.yaml:5:\d+: home.states\[0\]: 'Florida' does not match"):
        home_of_file(tmp_path, "home:\n  states: [Florida]\n")


def test_a_version_without_a_home_is_west_virginia() -> None:
    assert home_of(None) == home_of({}) == home_of({"name": "x"}) == WEST_VIRGINIA
    assert home_of({"states": ["FL"], "name": "South Florida 211"}) == FL


# --- places for a Florida home ---------------------------------------------------------------------------------------
def found(message: str, home: Home = FL) -> list[tuple[str, str | None, str]]:
    return [(p.kind, p.county, p.state) for p in find_places(message, home) if p.kind != "state"]


@pytest.mark.parametrize(
    ("message", "county"),
    [
        ("WIC in Miami-Dade County", "Miami-Dade"),
        ("WIC in miami-dade county", "Miami-Dade"),
        ("rent help Miami Dade", "Miami-Dade"),
        ("food stamps in Dade", "Miami-Dade"),
        ("help in Dade County", "Miami-Dade"),
        ("food bank in Miami-Dad", "Miami-Dade"),
        ("pantry in Browrd", "Broward"),
        ("food in browrd", "Broward"),
        ("pantry in browrd county", "Broward"),
        ("Saint Lucie County clinic", "St. Lucie"),
        ("St Lucie County clinic", "St. Lucie"),
        ("palm beach county food", "Palm Beach"),
    ],
)
def test_florida_counties_as_people_write_them(message: str, county: str) -> None:
    assert found(message) == [("county", county, "FL")]


@pytest.mark.parametrize(
    ("message", "county"),
    [
        ("is there a WIC office in Hialeah?", "Miami-Dade"),
        ("wic in hialeah", "Miami-Dade"),
        ("wic in hialeh", "Miami-Dade"),
        ("wic ofice in miami beach", "Miami-Dade"),
        ("SNAP in Miami", "Miami-Dade"),
        ("rent help in fort lauderdale", "Broward"),
        ("need food in West Palm Beach", "Palm Beach"),
        ("food in boca raton", "Palm Beach"),
    ],
)
def test_florida_towns_lower_case_and_misspelt(message: str, county: str) -> None:
    assert found(message) == [("town", county, "FL")]


def test_the_same_words_for_west_virginia_are_read_as_before() -> None:
    assert found("food stamps in Dade", WEST_VIRGINIA) == []
    assert [(p.kind, p.county) for p in find_places("pantry in Fayete County")] == [("county", "Fayette")]
    assert county_name("Dade", FL) == "Miami-Dade" and county_name("Dade") is None
    assert county_name("fayette county") == "Fayette" and county_name("fayette county", FL) is None


def test_a_zip_is_home_for_its_own_home_only() -> None:
    assert (zip_place("33125", FL).state, zip_place("33125", FL).counties) == ("FL", ("Miami-Dade",))
    assert zip_place("33125").counties == ("Miami-Dade",)  # the ZIP data's county, outside the home too


# --- scope and the redirect -------------------------------------------------------------------------------------------
def scope(message: str, home: Home = FL) -> tuple[list[str], list[str]]:
    sq = self_query(ContextRequest(message), [], NOW, home)
    reasons = home_scope(sq, ContextRequest(message), Caller("public", frozenset()), ContextSettings(), home)
    return reasons, [p.name for p in out_of_state(sq, home)]


def test_scope_and_out_of_state_follow_the_home() -> None:
    assert scope("food pantry near 33125") == (["FL county Miami-Dade", "FL ZIP 33125"], [])
    assert scope("food pantry near 33125", WEST_VIRGINIA) == ([], ["ZIP 33125"])
    assert scope("food bank in Atlanta GA") == ([], ["Atlanta, GA", "Georgia"])
    assert scope("food pantry in Beckley, WV") == ([], ["Beckley, WV", "West Virginia"])
    assert scope("SNAP in Florida")[0] == ["FL place in the text: Florida"]


def test_a_message_naming_any_home_state_is_in_scope() -> None:
    two = Home(("FL", "GA"), "Southeast 211")
    reasons, elsewhere = scope("food bank in Atlanta GA", two)
    assert elsewhere == [] and "FL/GA place in the text: Atlanta" in reasons
    assert scope("food pantry near 30303", two)[0] == ["FL/GA county Fulton", "FL/GA ZIP 30303"]


def route(response_class: str, home: Home, places: list[dict], reason: str = "place outside") -> dict:
    return {"route": {"intents": ["resource"], "response_class": response_class, "reason": reason,
                      "places": places, "home": home.route(), "wv_scoped": True}}  # fmt: skip


def test_the_redirect_names_the_home() -> None:
    atlanta = [{"kind": "town", "name": "Atlanta, GA", "state": "GA"}]
    assert canned_answer(route("redirect", FL, atlanta)) == (
        "Atlanta, GA is outside Florida. South Florida 211 covers Florida programs only. For other states, call 211 "
        "or the state's own benefits agency."
    )
    miami = [{"kind": "zip", "name": "ZIP 33125", "state": "FL"}]
    assert canned_answer(route("redirect", WEST_VIRGINIA, miami)) == (
        "ZIP 33125 is outside West Virginia. Living Memory covers West Virginia programs only. For other states, "
        "call 211 or the state's own benefits agency."
    )
    assert home_heading(route("answer", FL, [])["route"]) == "From the Florida evidence in South Florida 211:"
    assert home_heading({}) == "From the West Virginia evidence in Living Memory:"


def test_a_conversation_carries_a_home_place_and_drops_one_outside() -> None:
    state = from_history(["I live in Hialeah"], FL)
    assert (state.county, state.place) == ("Miami-Dade", "Hialeah")
    carried = carry(state, "where can I get WIC?", home=FL)
    assert carried.county == "Miami-Dade" and carried.place_from == "conversation: Hialeah"
    away = from_history(["I live in Hialeah", "now I'm in Atlanta, GA"], FL)
    assert (away.county, away.elsewhere) == (None, "Atlanta, GA")
    assert from_history(["I live in Hialeah"]).county is None  # West Virginia's home: Hialeah is no WV town
