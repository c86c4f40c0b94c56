"""County names: the forms the project keeps and compares them in (livemem.geo.names). No model, no data files."""

import math

import pandas as pd

from livemem.geo.names import (
    COUNTY_WORD,
    county_key,
    lower_without_county,
    tidy_county,
    tidy_county_key,
    without_county_word,
)


def test_without_county_word_trims_and_keeps_case_and_inner_spaces() -> None:
    assert without_county_word(" Fayette County ") == "Fayette"
    assert without_county_word("McDowell\tcounty") == "McDowell"
    assert without_county_word("Mc  Dowell COUNTY") == "Mc  Dowell"
    assert without_county_word("Fayette") == "Fayette"
    # the word alone is a name, not a suffix; only the last word County goes
    assert without_county_word("County") == "County"
    assert without_county_word("Fayette County County") == "Fayette County"
    assert without_county_word("Countyline") == "Countyline"


def test_county_key_compares_without_case_or_the_word_county() -> None:
    assert county_key("Fayette County") == county_key("fayette") == county_key(" FAYETTE county ") == "fayette"
    assert county_key("Mc  Dowell") == "mc  dowell"
    assert county_key("") == ""


def test_tidy_county_collapses_spaces() -> None:
    assert tidy_county("  Mc  Dowell   county ") == "Mc Dowell"
    assert tidy_county("Greenbrier\ncounty") == "Greenbrier"
    assert tidy_county("   ") == ""


def test_tidy_county_key_is_none_for_missing_or_blank_values() -> None:
    assert tidy_county_key(" Fayette  County ") == tidy_county_key("fayette") == "fayette"
    assert tidy_county_key("Mc  Dowell") == "mc dowell"
    assert tidy_county_key(None) is None
    assert tidy_county_key(math.nan) is None
    assert tidy_county_key(" county ") == "county"
    assert tidy_county_key("  ") is None


def test_lower_without_county_is_the_facts_comparison() -> None:
    assert lower_without_county(" Raleigh County ") == "raleigh"
    assert lower_without_county("Head Start") == "head start"
    # one space exactly: other spacing stays (unlike county_key)
    assert lower_without_county("Raleigh  County") == "raleigh "
    assert lower_without_county("Raleigh\tCounty") == "raleigh\tcounty"


def test_pattern_vectorised_matches_the_scalar_form() -> None:
    names = pd.Series(["Fayette County", "mc  dowell county", "Raleigh", "County"])
    assert names.str.replace(COUNTY_WORD, "", regex=True).tolist() == [without_county_word(n) for n in names]
