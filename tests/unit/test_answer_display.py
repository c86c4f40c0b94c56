"""What answers show: markdown passages as plain text, stored phone numbers as people write them."""

from __future__ import annotations

import pytest

from livemem.answer.chat import best_sentences
from livemem.answer.prompt import display_phone, plain_lines, tidy


@pytest.mark.parametrize(
    ("stored", "shown"),
    [
        ("+13045550104;ext=2", "(304) 555-0104 ext. 2"),
        ("+13045550101", "(304) 555-0101"),
        ("tel:+1-304-555-0104;ext=12", "(304) 555-0104 ext. 12"),
        ("+442071838750", "+44 20 7183 8750"),
        ("call the office", "call the office"),  # not a number: unchanged
        ("+1304555", "+1304555"),  # not a possible number: unchanged
    ],
)
def test_display_phone(stored, shown):
    assert display_phone(stored) == shown


def test_plain_lines_drop_markdown_and_keep_the_words():
    markdown = (
        "# Guide\n\n**Date:** 14 March 2026\n\nStart at the **Oak Hill benefits hub**, a `help desk` "
        "([site](https://example.org)).\n\n- Phone: +13045550104;ext=2\n\n"
        "| Town | Pantry | Contact |\n| --- | --- | --- |\n| Oak Hill | Hilltop Pantry | (304) 555-0150 |\n"
    )
    assert plain_lines(markdown) == [
        "Date: 14 March 2026",
        "Start at the Oak Hill benefits hub, a help desk (site).",
        "Phone: (304) 555-0104 ext. 2",
        "Town: Oak Hill; Pantry: Hilltop Pantry; Contact: (304) 555-0150",
    ]
    assert plain_lines(markdown, headings=True)[0] == "Guide"


def test_a_chunk_cut_mid_table_or_mid_emphasis_leaves_no_debris():
    cut = "Tue & Thu 10–2 |\n| Mount Hope | Mission Pantry | Mon 11–3 |\n| --- |\nbenefits hub** and Date:** today"
    lines = plain_lines(cut)
    assert lines == ["Tue & Thu 10–2", "Mount Hope; Mission Pantry; Mon 11–3", "benefits hub and Date: today"]
    assert not any("|" in line or "**" in line for line in lines)
    assert tidy("## **Bold** heading with __under__ and a `code`") == "Bold heading with under and a code"


def test_best_sentences_quote_list_items_and_rows_as_sentences():
    content = "Intro text that is long enough to count.\n\n- Oak Hill benefits hub: 210 Main Street, Oak Hill\n"
    assert (
        best_sentences(content, "where is the Oak Hill hub", n=1) == "Oak Hill benefits hub: 210 Main Street, Oak Hill."
    )
