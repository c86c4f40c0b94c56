"""Opening hours parsed from registry text and structured schedules, and the time a question asks about
(livemem.registry.hours)."""

from __future__ import annotations

from datetime import datetime

import pytest

from livemem.registry.hours import (
    asked_time,
    hours_text,
    open_during,
    parse_hours,
    row_slots,
    schedule_slots,
    when_words,
)

NOW = datetime(2026, 12, 1, 10, 30)  # a Tuesday morning in December


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Mon-Fri 8:30-4:30", ["Mon–Fri 8:30 am–4:30 pm"]),
        ("Tue 4:00-7:00", ["Tue 4:00 pm–7:00 pm"]),  # a pantry's evening, written without pm
        ("Mon-Fri 11:00-1:00", ["Mon–Fri 11:00 am–1:00 pm"]),
        ("Wed 10:00-2:00; 2nd Sat 9:00-12:00", ["Wed 10:00 am–2:00 pm", "2nd Sat 9:00 am–12:00 pm"]),
        ("Tue & Thu 9am-1pm", ["Tue, Thu 9:00 am–1:00 pm"]),
        ("Saturdays 10 am to 2 pm", ["Sat 10:00 am–2:00 pm"]),
        ("Monday - Friday 9:00 AM - 5:00 PM", ["Mon–Fri 9:00 am–5:00 pm"]),
        ("24 hours", ["24 hours"]),
        ("Call for an appointment", []),
        ("", []),
        (None, []),
    ],
)
def test_hours_as_registries_write_them(text, expected):
    assert [s.text() for s in parse_hours(text)] == expected


def test_seasons_and_structured_schedules():
    winter = parse_hours("Mon-Fri 9:00-3:00 (Nov-Mar)")[0]
    assert winter.months == frozenset({11, 12, 1, 2, 3})
    slots = schedule_slots([{"days": ["MO", "TU"], "opens_at": "09:00", "closes_at": "17:00"}, {"days": []}])
    assert [s.text() for s in slots] == ["Mon, Tue 9:00 am–5:00 pm"]
    row = {"hours": "Sat 9:00-1:00", "schedules": [{"days": ["SA"], "opens_at": "10:00", "closes_at": "12:00"}]}
    assert [s.text() for s in row_slots(row)] == ["Sat 10:00 am–12:00 pm"]  # the structured schedule wins


@pytest.mark.parametrize(
    ("message", "hours", "open_then"),
    [
        ("food pantry open on Saturday", "Mon-Fri 8:30-4:30", False),
        ("food pantry open on Saturday", "Mon-Fri 8:00-6:00; Sat 9:00-12:00", True),
        ("Where can I get food on a Tuesday evening in Raleigh County?", "Tue 4:00-7:00", True),
        ("Where can I get food on a Tuesday evening in Raleigh County?", "Tue-Thu 8:00-4:00", False),
        ("is the pantry open now", "Mon-Fri 8:30-4:30", True),  # Tuesday 10:30
        ("is the pantry open now", "Wed 1:00-5:00", False),
        ("anything open this weekend", "Sat 9:00-1:00 (Nov-Dec)", True),  # in December
        ("anything open this weekend", "Mon-Fri 9:00-3:00 (Nov-Mar)", False),
        ("¿hay comida el sábado por la mañana?", "Sat 9:00-1:00", True),
        ("food pantry open tonight", "Mon-Fri 8:30-4:30", False),
        ("food pantry open on Saturday", "Call first", None),
    ],
)
def test_the_time_a_question_asks_about(message, hours, open_then):
    asked = asked_time(message, NOW)
    assert asked is not None
    assert open_during(parse_hours(hours), asked) is open_then


def test_a_question_that_names_no_time():
    assert asked_time("food pantry in Beckley", NOW) is None
    assert asked_time("SNAP office hours", NOW) is None


# --- in Spanish: the hours and the asked time as a Spanish answer says them (issue 48) ---------------------------------
@pytest.mark.parametrize(
    ("text", "spanish"),
    [
        ("Mon-Fri 8:30-4:30", "lun–vie 8:30–16:30"),
        ("Wed 10:00-2:00; 2nd Sat 9:00-12:00", "mié 10:00–14:00; 2.º sáb 9:00–12:00"),
        ("Mon-Fri 9:00-3:00 (Nov-Mar)", "lun–vie 9:00–15:00 (nov–mar)"),  # the season is kept
        ("Tue & Thu 9am-1pm", "mar, jue 9:00–13:00"),
        ("1st Mon 10:00-1:00", "1.er lun 10:00–13:00"),
        ("24 hours", "24 horas"),
        ("Sign-up Mon-Fri 10:00-2:00 (Nov)", "Sign-up Mon-Fri 10:00-2:00 (Nov)"),  # words not parsed: as written
        ("Call for an appointment", "Call for an appointment"),
        ("", ""),
    ],
)
def test_hours_in_spanish_only_when_the_parse_says_all_of_them(text, spanish):
    assert hours_text(text, "es") == spanish
    assert hours_text(text) == text  # English: the registry's text as it is


@pytest.mark.parametrize(
    ("message", "phrase", "said_es"),
    [
        ("¿Está abierto el Beckley Family Shelter ahora?", "ahora", "ahora"),
        ("¿Está abierta ahora la clínica de Oak Hill?", "ahora", "ahora"),
        ("¿Está abierta la oficina de SNAP el sábado?", "el sábado", "el sábado"),  # Spanish days in lower case
        ("despensa de alimentos abierta jueves", "jueves", "el jueves"),
        ("¿abren el fin de semana?", "el fin de semana", "el fin de semana"),
    ],
)
def test_the_time_a_spanish_question_asks_about(message, phrase, said_es):
    asked = asked_time(message, NOW)
    assert asked is not None and asked.phrase == phrase
    assert when_words(asked.phrase, "es") == said_es


def test_open_now_is_said_once():
    asked = asked_time("Is the Beckley Family Shelter open now?", NOW)
    assert asked is not None and asked.phrase == "open now"
    assert when_words(asked.phrase) == "now"  # "Yes, open now", never "Yes, open open now"
    assert when_words(asked_time("food pantry open on Saturday", NOW).phrase) == "on Saturday"
    assert asked_time("necesito comida ahora", NOW) is None  # "now" alone asks no opening time (as in English)
