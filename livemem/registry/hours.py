"""Opening hours as people and registries write them, parsed into weekly slots, and the time a question names.

- ``parse_hours``: a registry row's hours text ("Mon-Fri 8:30-4:30", "Wed 10:00-2:00; 2nd Sat 9:00-12:00",
  "Tue 4:00-7:00", "Sat 9am-1pm (Nov-Dec)", "24 hours") → ``Slot`` objects: weekdays, opening and closing minute
  of the day, the months it applies in and the week of the month ("2nd Sat"). Times without am/pm are read as an
  office or pantry keeps them: 7-11 in the morning, 12 noon, 1-6 in the afternoon or evening ("Tue 4:00-7:00" is
  4 pm to 7 pm; "11:00-1:00" is 11 am to 1 pm). Structured schedules (HSDS ``schedules``: ``days``, ``opens_at``,
  ``closes_at``) become slots directly (``schedule_slots``). Text that is no schedule gives no slots, never a guess.
- ``asked_time``: the time a message asks about ("open on Saturday", "Tuesday evening", "this weekend", "open now",
  "tonight", Spanish day names) as weekdays and a window of minutes, or None.
- ``open_during``: whether slots meet that time (None: the hours say nothing either way).
- In Spanish (an answer to a Spanish question): ``hours_text`` gives an hours text as parsed slots in Spanish
  ("lun–vie 8:30–16:30") when the parse accounts for all of it (else as the registry wrote it), and ``when_words``
  the asked time as a line says it ("el sábado", "ahora").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
ES_DAYS = ("lun", "mar", "mié", "jue", "vie", "sáb", "dom")
ES_MONTHS = ("ene", "feb", "mar", "abr", "may", "jun", "jul", "ago", "sep", "oct", "nov", "dic")
ES_NTH = {1: "1.er ", 2: "2.º ", 3: "3.er ", 4: "4.º ", -1: "último "}
HSDS_DAYS = {"MO": 0, "TU": 1, "WE": 2, "TH": 3, "FR": 4, "SA": 5, "SU": 6}
_DAY_NAMES = {
    **{d: i for i, d in enumerate(DAYS)},
    "monday": 0, "tuesday": 1, "wednesday": 2, "thursday": 3, "friday": 4, "saturday": 5, "sunday": 6,
    "tues": 1, "wednes": 2, "thur": 3, "thurs": 3, "weds": 2,
    "lunes": 0, "martes": 1, "miércoles": 2, "miercoles": 2, "jueves": 3, "viernes": 4, "sábado": 5, "sabado": 5,
    "domingo": 6,
}  # fmt: skip
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAY = r"(?:mon|tue|tues|wed|weds|thu|thur|thurs|fri|sat|sun)[a-z]*\.?"
TIME = r"\d{1,2}(?::\d{2})?\s*(?:[ap]\.?m\.?)?|noon|midnight"
_SLOT = re.compile(
    rf"(?:(?P<nth>1st|2nd|3rd|4th|last)\s+)?(?P<days>{DAY}(?:\s*(?:-|–|to|&|and|,|/)\s*{DAY})*)s?\s*:?\s*"
    rf"(?P<open>{TIME})\s*(?:-|–|to)\s*(?P<close>{TIME})",
    re.IGNORECASE,
)
_SEASON = re.compile(
    r"\((?P<a>[a-z]{3})[a-z]*\s*(?:-|–|to)\s*(?P<b>[a-z]{3})[a-z]*\)|\((?P<one>[a-z]{3})[a-z]*\)", re.I
)
ALWAYS = re.compile(r"\b(?:24\s*(?:hours|hrs|h)|24/7|open all day and night)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Slot:
    """One weekly opening: weekdays (0 = Monday), minutes of the day [opens, closes), months (1-12; empty: all
    year) and the week of the month (``nth``: 1-4, -1 for the last; 0: every week)."""

    days: frozenset[int]
    opens: int
    closes: int
    months: frozenset[int] = frozenset()
    nth: int = 0

    def text(self, lang: str = "en") -> str:
        """``Tue 4:00 pm–7:00 pm``; ``24 hours``. In Spanish (``lang="es"``): ``mar 16:00–19:00``, ``24 horas``, with
        its months (``lun–vie 9:00–15:00 (nov–mar)``)."""
        es = lang == "es"
        days = sorted(self.days)
        if len(days) == 7 and self.opens == 0 and self.closes >= 24 * 60:
            return "24 horas" if es else "24 hours"
        names = ES_DAYS if es else tuple(d.title() for d in DAYS)
        if len(days) > 2 and days == list(range(days[0], days[-1] + 1)):
            named = f"{names[days[0]]}–{names[days[-1]]}"
        else:
            named = ", ".join(names[d] for d in days)
        if es:
            months = f" ({_months_es(self.months)})" if self.months else ""
            return f"{ES_NTH.get(self.nth, '')}{named} {_clock24(self.opens)}–{_clock24(self.closes)}{months}"
        nth = {1: "1st ", 2: "2nd ", 3: "3rd ", 4: "4th ", -1: "last "}.get(self.nth, "")
        return f"{nth}{named} {_clock(self.opens)}–{_clock(self.closes)}"


def _clock(minute: int) -> str:
    hour, mins = divmod(minute % (24 * 60), 60)
    return f"{(hour - 1) % 12 + 1}:{mins:02d} {'am' if hour < 12 else 'pm'}"


def _clock24(minute: int) -> str:
    """``16:30``; midnight at the end of a day is ``24:00``."""
    hour, mins = divmod(min(minute, 24 * 60), 60)
    return f"{hour}:{mins:02d}"


def _months_es(months: frozenset[int]) -> str:
    """``nov–mar`` (a run of months, across the new year too); ``nov``; else the months listed."""
    if len(months) == 1:
        return ES_MONTHS[next(iter(months)) - 1]
    starts = [m for m in sorted(months) if (m - 2) % 12 + 1 not in months]
    if len(starts) == 1:
        last = starts[0]
        while last % 12 + 1 in months:
            last = last % 12 + 1
        return f"{ES_MONTHS[starts[0] - 1]}–{ES_MONTHS[last - 1]}"
    return ", ".join(ES_MONTHS[m - 1] for m in sorted(months))


def _minute(text: str, closing: bool = False, after: int | None = None) -> int | None:
    """Minutes after midnight of a time as written; without am/pm, 7-11 is morning and 12-6 afternoon (a closing time
    at or before the opening one is moved 12 hours on)."""
    text = text.strip().lower().replace(".", "")
    if text == "noon":
        return 12 * 60
    if text == "midnight":
        return 24 * 60
    m = re.fullmatch(r"(\d{1,2})(?::(\d{2}))?\s*([ap]m)?", text)
    if m is None:
        return None
    hour, mins, half = int(m.group(1)), int(m.group(2) or 0), m.group(3)
    if hour > 24 or mins > 59:
        return None
    if half == "pm" and hour < 12:
        hour += 12
    elif half == "am" and hour == 12:
        hour = 0
    elif half is None and 1 <= hour <= 6:
        hour += 12
    minute = hour * 60 + mins
    if closing and after is not None and minute <= after:
        minute += 12 * 60
    return minute


def _days(text: str) -> frozenset[int]:
    """``Mon-Fri`` → Monday to Friday; ``Tue & Thu``, ``Mon, Wed`` → those days."""
    parts = re.split(r"\s*(&|and|,|/)\s*", text.strip().lower())
    out: set[int] = set()
    for part in parts:
        if part in ("&", "and", ",", "/", ""):
            continue
        ends = re.split(r"\s*(?:-|–|to)\s*", part)
        found = [_DAY_NAMES.get(e.rstrip(".").rstrip("s"), _DAY_NAMES.get(e.rstrip("."))) for e in ends]
        found = [d if d is not None else _DAY_NAMES.get(e[:3]) for d, e in zip(found, ends, strict=True)]
        days = [d for d in found if d is not None]
        if len(days) < len(found):
            continue
        if len(days) == 2:
            a, b = days
            out |= set(range(a, b + 1)) if a <= b else set(range(a, 7)) | set(range(0, b + 1))
        else:
            out |= set(days)
    return frozenset(out)


def _months(text: str) -> frozenset[int]:
    m = _SEASON.search(text)
    if m is None:
        return frozenset()
    if m.group("one"):
        one = m.group("one").lower()
        return frozenset({_MONTHS.index(one) + 1}) if one in _MONTHS else frozenset()
    a, b = m.group("a").lower(), m.group("b").lower()
    if a not in _MONTHS or b not in _MONTHS:
        return frozenset()
    i, j = _MONTHS.index(a) + 1, _MONTHS.index(b) + 1
    return frozenset(range(i, j + 1)) if i <= j else frozenset([*range(i, 13), *range(1, j + 1)])


def parse_hours(text: str | None) -> list[Slot]:
    """The weekly slots of an hours text (module docstring); [] when it names none."""
    if not text:
        return []
    if ALWAYS.search(text):
        return [Slot(frozenset(range(7)), 0, 24 * 60)]
    slots: list[Slot] = []
    for part in re.split(r";|\n", text):
        months = _months(part)
        for m in _SLOT.finditer(part):
            opens = _minute(m.group("open"))
            closes = _minute(m.group("close"), closing=True, after=opens)
            days = _days(m.group("days"))
            if opens is None or closes is None or not days or closes <= opens:
                continue
            nth = {"1st": 1, "2nd": 2, "3rd": 3, "4th": 4, "last": -1}.get((m.group("nth") or "").lower(), 0)
            slots.append(Slot(days, opens, closes, months, nth))
    return slots


def schedule_slots(schedules: list[dict[str, Any]] | None) -> list[Slot]:
    """Slots of structured schedules (``{"days": ["MO", ...], "opens_at": "09:00", "closes_at": "17:00"}``)."""
    out: list[Slot] = []
    for item in schedules or []:
        days = frozenset(HSDS_DAYS[d] for d in item.get("days") or [] if d in HSDS_DAYS)
        try:
            opens = int(item["opens_at"][:2]) * 60 + int(item["opens_at"][3:5])
            closes = int(item["closes_at"][:2]) * 60 + int(item["closes_at"][3:5])
        except (KeyError, TypeError, ValueError):
            continue
        if days and closes > opens:
            out.append(Slot(days, opens, closes))
    return out


def row_slots(row: dict[str, Any]) -> list[Slot]:
    """A registry row's slots: its structured schedules where it has them, else its hours text."""
    return schedule_slots(row.get("schedules")) or parse_hours(row.get("hours"))


def hours_text(text: str | None, lang: str = "en") -> str:
    """An hours text as an answer in ``lang`` gives it: as written in English; in Spanish its parsed slots
    ("Mon-Fri 8:30-4:30" → "lun–vie 8:30–16:30", "24 hours" → "24 horas") when they account for all of the text,
    else the text as the registry wrote it ("Sign-up Mon-Fri 10:00-2:00 (Nov)": its words are not guessed at)."""
    text = str(text or "").strip()
    if lang != "es" or not text:
        return text
    slots = parse_hours(text)
    if not slots:
        return text
    if ALWAYS.search(text):
        rest = ALWAYS.sub("", text)
    else:
        if len(_SLOT.findall(text)) != len(slots):  # a schedule the parse skipped: say the text as written
            return text
        rest = _SEASON.sub("", _SLOT.sub("", text))
    if re.sub(r"[\s;,.()\-–]+", "", rest):
        return text
    return "; ".join(s.text("es") for s in slots)


# --- the time a question asks about ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class AskedTime:
    """Weekdays (0 = Monday) and a window of minutes [start, end) a message asks about, and the words it used."""

    days: frozenset[int]
    start: int
    end: int
    phrase: str
    month: int | None = None


PARTS_OF_DAY = {
    "morning": (8 * 60, 12 * 60), "mañana": (8 * 60, 12 * 60), "afternoon": (12 * 60, 17 * 60),
    "tarde": (12 * 60, 19 * 60), "evening": (17 * 60, 21 * 60), "tonight": (17 * 60, 23 * 60),
    "night": (18 * 60, 23 * 60), "noche": (18 * 60, 23 * 60), "lunch": (11 * 60, 14 * 60),
}  # fmt: skip
_ASKED_DAY = re.compile(
    r"\b(?:on |this |next |el |los )?(?P<day>monday|tuesday|wednesday|thursday|friday|saturday|sunday|lunes|martes|"
    r"mi[eé]rcoles|jueves|viernes|s[aá]bado|domingo)s?\b(?:\s+(?:in the\s+)?(?P<part>morning|afternoon|evening|night|"
    r"por la (?:mañana|tarde|noche)))?",
    re.IGNORECASE,
)


ES_NOW = re.compile(
    r"\babiert[oa]s?\b.{0,80}?\b(?P<now>ahora(?: mismo)?|en este momento)\b"
    r"|\b(?P<now2>ahora(?: mismo)?|en este momento)\b.{0,80}?\babiert[oa]s?\b",
    re.IGNORECASE,
)


def when_words(phrase: str | None, lang: str = "en") -> str:
    """The asked time as a line says it: "now" for "open now" (not "open open now"), "on Saturday"; in Spanish
    with its article ("sábado" → "el sábado", "fin de semana" → "el fin de semana")."""
    when = re.sub(r"^(?:open|abiert[oa]s?)\s+", "", str(phrase or ""), flags=re.I).strip()
    if lang == "es":
        if not when:
            return "entonces"
        if re.match(r"(?:lunes|martes|mi[eé]rcoles|jueves|viernes|s[aá]bado|domingo|fin de semana)", when, re.I):
            return f"el {when}"
        return when
    return when or "then"


def asked_time(message: str, now: datetime) -> AskedTime | None:
    """The time ``message`` asks a program to be open (``now``: the asker's local time, for "open now", "today",
    "tonight"); None when it names none."""
    text = message.lower()
    minute = now.hour * 60 + now.minute
    if m := re.search(r"\b(?:open|abierto|abierta) (?:right )?now\b|\bopen at the moment\b|\bahora mismo\b", text):
        return AskedTime(frozenset({now.weekday()}), minute, minute + 1, m.group(0), now.month)
    if m := ES_NOW.search(text):  # "¿está abierto el refugio ahora?", "¿está abierta ahora la clínica?"
        return AskedTime(frozenset({now.weekday()}), minute, minute + 1, m.group("now") or m.group("now2"), now.month)
    if m := re.search(r"\b(?:this )?weekend\b|\b(?:(?:este|el) )?fin de semana\b", text):
        return AskedTime(frozenset({5, 6}), 0, 24 * 60, m.group(0), now.month)
    if m := _ASKED_DAY.search(text):
        day = _DAY_NAMES[m.group("day").replace("é", "e").replace("á", "a")]
        part = (m.group("part") or "").replace("por la ", "").replace("in the ", "")
        start, end = PARTS_OF_DAY.get(part, (0, 24 * 60))
        phrase = re.sub(r"\b[a-z]+day\b", lambda w: w.group(0).title(), m.group(0).strip())  # Spanish: lower case
        return AskedTime(frozenset({day}), start, end, phrase, now.month)
    if m := re.search(r"\btonight\b|\besta noche\b", text):
        start, end = PARTS_OF_DAY["tonight"]
        return AskedTime(frozenset({now.weekday()}), start, end, m.group(0), now.month)
    if m := re.search(r"\b(?:open )?today\b|\bhoy\b", text):
        return AskedTime(frozenset({now.weekday()}), now.hour * 60 + now.minute, 24 * 60, m.group(0), now.month)
    return None


def open_during(slots: list[Slot], asked: AskedTime) -> bool | None:
    """Whether any slot is open at some minute of the asked window on an asked day (in its months); None when
    there are no slots to tell."""
    if not slots:
        return None
    for slot in slots:
        if not slot.days & asked.days:
            continue
        if slot.months and asked.month is not None and asked.month not in slot.months:
            continue
        if slot.opens < asked.end and asked.start < slot.closes:
            return True
    return False


def open_text(slots: list[Slot], asked: AskedTime) -> str:
    """The slots on the asked days, as the answer says them (``Tue 4:00 pm–7:00 pm``)."""
    return "; ".join(s.text() for s in slots if s.days & asked.days) or "; ".join(s.text() for s in slots)
