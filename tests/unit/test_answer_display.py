"""What answers show: markdown passages as plain text, stored phone numbers as people write them."""

from __future__ import annotations

import pytest

from livemem.answer.chat import best_sentences, extractive_answer, hours_note, verification_words, yes_no_lead
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


# --- a Spanish question: the answer's own words in Spanish, none English on a line (issue 48) -------------------------
SNAP_ROW = {
    "local_resource_id": "ral-dhhr-snap", "name": "Raleigh County DHHR Office – SNAP", "county": "Raleigh",
    "resource_type": "snap", "description": "SNAP applications and renewals.",
    "address": "407 Neville Street, Beckley, WV 25801", "contact_phone": "+13045550121",
    "hours": "Mon-Fri 8:30-4:30", "ref": 3,
    "conflicts": [{"field": "phone", "other": "+13045550102", "source": "place:wvb-001"}],
}  # fmt: skip


def program_context(message: str, open_then: bool | None, asked: str | None = None) -> dict:
    item = {"kind": "registry", "id": "ral-dhhr-snap"}
    if open_then is not None:
        item |= {"open_when_asked": open_then, "asked_time": asked}
    route = {
        "programs": [item], "resource_types": ["snap"], "negotiation": [], "graph": None, "persona": None,
        "wv_scoped": True, "home": None, "budget": None,
    }  # fmt: skip
    return {"message": message, "route": route, "registry": [SNAP_ROW], "spatial": [], "unstructured": [],
            "web": [], "structured_facts": []}  # fmt: skip


@pytest.mark.parametrize(
    ("message", "open_then", "asked", "lead"),
    [
        ("¿Está abierta la oficina de SNAP en Beckley el sábado?", False, "el sábado",
         "No, no está abierta el sábado según su horario publicado: "),
        ("¿Está abierto el Raleigh County DHHR Office ahora?", True, "ahora", "Sí, está abierto ahora: "),
        ("Is the SNAP office in Beckley open on Saturday?", False, "on Saturday",
         "No, not open on Saturday by its listed hours: "),
        ("Is the SNAP office in Beckley open now?", True, "open now", "Yes, open now: "),
        ("¿Hay una oficina de SNAP en Beckley?", None, None, "Sí: "),
        ("¿Tiene Beckley una oficina de SNAP?", None, None, "Sí: "),
        ("Is there a SNAP office in Beckley?", None, None, "Yes: "),
    ],
)  # fmt: skip
def test_a_yes_no_question_is_led_in_its_own_language(message, open_then, asked, lead):
    assert yes_no_lead(program_context(message, open_then, asked)) == lead


def test_a_spanish_answer_says_its_own_words_in_spanish():
    answer = extractive_answer(
        program_context("¿Está abierta la oficina de SNAP en Beckley el sábado?", False, "el sábado")
    )
    head, line = answer.splitlines()
    assert head == "Según la información de West Virginia en Living Memory:"
    assert line.startswith("- No, no está abierta el sábado según su horario publicado: Raleigh County DHHR Office")
    assert "(condado de Raleigh)" in line and "teléfono (304) 555-0121" in line and "horario lun–vie 8:30–16:30" in line
    assert "(No atiende el sábado según su horario publicado.)" in line
    assert "(Nota: un lugar del mapa da el teléfono (304) 555-0102" in line
    for english in ("Not open", "by its listed hours", "County)", "; phone", "; hours", "Note:", "Yes"):
        assert english not in line, english
    english = extractive_answer(
        program_context("Is the SNAP office in Beckley open on Saturday?", False, "on Saturday")
    )
    assert english.splitlines()[0] == "From the West Virginia evidence in Living Memory:"
    assert "(Raleigh County): " in english and "; hours Mon-Fri 8:30-4:30" in english
    assert "(Not open on Saturday by its listed hours.)" in english


def test_hours_notes_in_spanish():
    assert hours_note({"open_when_asked": True, "asked_time": "ahora"}, "es") == " (Atiende ahora.)"
    assert hours_note({"open_when_asked": False, "asked_time": "jueves"}, "es") == (
        " (No atiende el jueves según su horario publicado.)"
    )
    assert hours_note({"open_when_asked": True, "asked_time": "open now"}) == " (Open now.)"
    assert hours_note({}) == hours_note({}, "es") == ""
    assert verification_words("listed 2019-08-19, not verified since", "es") == (
        "publicado el 2019-08-19, sin verificar desde entonces"
    )
