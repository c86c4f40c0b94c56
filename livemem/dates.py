"""Dates that mean what people mean.

Two sides of one idea (docs/context.md, "Dates"):

- **The date a document carries** (``document_date``), found at chunking time and kept in each chunk's ``domain``
  JSON as ``document_date`` (ISO date), ``date_source`` and ``date_precision``. YAML front matter (``date:``) wins;
  else the more precise of a date in the first markdown heading ("Council Minutes — September 2026") and one in
  the file name (``2026-09-14-council-minutes.md``, ``2026-09-council-minutes.md``), the heading on a tie. Without one the commit time stands in
  (``date_source: commit``), at query time, so nothing is stored for it.
- **The date range a question names** (``question_dates``): "in September 2026", "September 2026", "2025",
  "last month" (the calendar month before this one), "past 30 days", "this year", "since March 2026",
  "before 2026", "yesterday", "recently", "from March to June 2026", "between March and May", "from March 2026 on"
  (since), "minutes from March 2026" (that month: "from" alone says where they come from), "last fall", "this fall"
  (while it lasts), "winter 2025". The range filters on the document date where a chunk has one, else its
  commit time (``date_mask``): the question's dates win over the commit time.

Explicit patterns rather than a fuzzy parser: ``dateutil``'s fuzzy mode reads "Chapter 3" as the 3rd of this month,
and a date that was never written must not filter anyone's evidence away.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import PurePosixPath
from typing import Any, overload

import numpy as np
import yaml

from livemem import yamlio

# English names, spelled out: calendar.month_name follows the process locale.
_MONTH_NAMES = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]
MONTHS = {name: i + 1 for i, name in enumerate(_MONTH_NAMES)} | {n[:3]: i + 1 for i, n in enumerate(_MONTH_NAMES)}
MONTHS["sept"] = 9
MONTH_RE = r"(?:" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
YEAR_RE = r"(?:19|20)\d\d"
_ISO = re.compile(rf"(?<![\d])({YEAR_RE})[-_./](\d\d)(?:[-_./](\d\d))?(?!\d)")
# File names only: 20260914, and a year between the name's words (annual-report-2025).
_COMPACT = re.compile(rf"(?<![\d])({YEAR_RE})(\d\d)(\d\d)(?!\d)")
_NAME_YEAR = re.compile(rf"(?<![0-9A-Za-z])({YEAR_RE})(?![0-9A-Za-z])")
_DAY_MONTH_YEAR = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+({MONTH_RE})\s*,?\s+({YEAR_RE})\b", re.IGNORECASE)
_MONTH_DAY_YEAR = re.compile(rf"\b({MONTH_RE})\s+(\d{{1,2}})(?:st|nd|rd|th)?\s*,?\s+({YEAR_RE})\b", re.IGNORECASE)
_MONTH_YEAR = re.compile(rf"\b({MONTH_RE})\s*,?\s+({YEAR_RE})\b", re.IGNORECASE)
_YEAR = re.compile(rf"(?<![\w$£€.,-])({YEAR_RE})(?![\d,.-]\d|\d|-)")
_FOUR_DIGITS = re.compile(r"\d{4}")
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL)


def utc_now() -> datetime:
    """Now, in UTC (an aware datetime): the one clock every step stamps its records with."""
    return datetime.now(UTC)


@overload
def iso(value: datetime) -> str: ...
@overload
def iso(value: None) -> None: ...
def iso(value: datetime | None) -> str | None:
    """A datetime as ISO 8601: an aware one in UTC with a ``Z`` (``2026-09-14T00:00:00Z``), a naive one as it is;
    None stays None. The one formatter of the version manifests, traces, registry history and answers' routes."""
    if value is None:
        return None
    return (value.astimezone(UTC) if value.tzinfo is not None else value).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Period:
    """A date as written, with how much of it was written: the day, its month or its year."""

    start: date
    precision: str  # day | month | year

    @property
    def end(self) -> date:
        """The first day after the period."""
        if self.precision == "day":
            return self.start + timedelta(days=1)
        if self.precision == "month":
            return _add_months(self.start, 1)
        return self.start.replace(year=self.start.year + 1)


def _add_months(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def _period(year: str, month: str | int | None = None, day: str | None = None) -> Period | None:
    try:
        m = month if isinstance(month, int) or month is None else MONTHS[month.lower().rstrip(".")]
        if m is None:
            return Period(date(int(year), 1, 1), "year")
        if day is None:
            return Period(date(int(year), m, 1), "month")
        return Period(date(int(year), m, int(day)), "day")
    except (ValueError, KeyError):  # 2026-13-40: not a date
        return None


def find_period(text: str, *, bare_year: bool = True, file_name: bool = False) -> tuple[Period, re.Match] | None:
    """The most precise date written in ``text`` (a day before a month before a year; the first of a kind);
    ``file_name``: also ``20260914`` and a year set off by ``-`` or ``_``."""
    if not _FOUR_DIGITS.search(text):  # every date written here names a year: most titles and names have none
        return None
    patterns: list[tuple[re.Pattern[str], Any]] = [
        (_ISO, lambda m: _period(m.group(1), int(m.group(2)), m.group(3))),
        (_DAY_MONTH_YEAR, lambda m: _period(m.group(3), m.group(2), m.group(1))),
        (_MONTH_DAY_YEAR, lambda m: _period(m.group(3), m.group(1), m.group(2))),
    ]
    if file_name:
        patterns.append((_COMPACT, lambda m: _period(m.group(1), int(m.group(2)), m.group(3))))
    patterns.append((_MONTH_YEAR, lambda m: _period(m.group(2), m.group(1))))
    if bare_year:
        patterns.append((_NAME_YEAR if file_name else _YEAR, lambda m: _period(m.group(1))))
    found: list[tuple[int, int, Period, re.Match]] = []
    for rank, (pattern, make) in enumerate(patterns):
        for m in pattern.finditer(text):
            period = make(m)
            if period is not None:
                found.append((-_PRECISION[period.precision], rank, period, m))
                break
    if not found:
        return None
    _, _, period, match = min(found, key=lambda f: (f[0], f[3].start(), f[1]))
    return period, match


_PRECISION = {"day": 3, "month": 2, "year": 1}


def _front_matter_date(text: str) -> Period | None:
    m = _FRONT_MATTER.match(text)
    if not m:
        return None
    try:
        meta = yamlio.load(m.group(1), unique_keys=False)  # bounded: a hostile document cannot stop its build
    except yaml.YAMLError:
        return None
    value = meta.get("date") if isinstance(meta, dict) else None
    if isinstance(value, datetime):
        return Period(value.date(), "day")
    if isinstance(value, date):
        return Period(value, "day")
    if isinstance(value, int | str):
        found = find_period(str(value))
        return found[0] if found else None
    return None


def document_date(path: str, text: str) -> dict[str, str] | None:
    """The date a document carries, for its chunks' ``domain``: ``document_date`` (ISO), ``date_source``
    (front_matter, heading or file_name) and ``date_precision`` (day, month or year); None when it carries none
    (its commit time stands in at query time)."""
    candidates: list[tuple[str, Period | None]] = [("front_matter", _front_matter_date(text))]
    name = PurePosixPath(path)
    if name.suffix.lower() in {".md", ".markdown", ".mdx", ".mdown"}:
        front = _FRONT_MATTER.match(text)
        heading = _first_heading(text[front.end() :] if front else text)
        found = find_period(heading) if heading else None
        candidates.append(("heading", found[0] if found else None))
    found = find_period(name.stem, file_name=True)
    candidates.append(("file_name", found[0] if found else None))
    found_ = [(source, period) for source, period in candidates if period is not None]
    if not found_:
        return None
    # Front matter is the author's own statement; otherwise the more precise of heading and file name wins
    # ("Minutes — September 2026" in a file named 2026-09-19-minutes.md was held on the 19th).
    source, period = (
        found_[0] if found_[0][0] == "front_matter" else max(found_, key=lambda f: _PRECISION[f[1].precision])
    )
    return {"document_date": period.start.isoformat(), "date_source": source, "date_precision": period.precision}


def _first_heading(text: str) -> str | None:
    """The first ATX heading outside code fences (a ``#`` comment in a fenced block is not a heading)."""
    fenced = False
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if not fenced and (m := _HEADING.match(line)):
            return m.group(1)
    return None


# --- the range a question names ------------------------------------------------------------------------------------
@dataclass
class DateRange:
    after: datetime | None = None
    before: datetime | None = None
    phrase: str | None = None


UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}
# After a bare number, words that make it an address or an amount rather than a year.
_NOT_A_YEAR = re.compile(
    r"(?:\s+[A-Z][\w.'-]*){0,3}\s+(?:street|st|road|rd|avenue|ave|drive|dr|lane|ln|boulevard|blvd|way|pike|route)\b"
    r"|\s*(?:dollars|usd|bucks|people|households|families|calories|kwh)\b",
    re.IGNORECASE,
)


def _at(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def question_dates(message: str, now: datetime) -> tuple[DateRange, list[dict[str, str]]]:
    """The date range a question names (relative phrases from ``now``), and a note per bound for ``route``. The
    first of these kinds the question has wins: a relative phrase ("last month"), a span ("from March to June 2026",
    "this fall"), open bounds ("since March 2026", "before 2026"), a date ("in September 2026"), a month alone."""
    text = message.lower()
    today = now.date()
    bounds = _Bounds()
    _relative(text, now, bounds)
    if bounds.found.after or bounds.found.before:
        return bounds.found, bounds.notes
    # "from March to June 2026", "between ...", "this fall", "from March 2026"
    if _named_span(text, today, bounds.period) or _open_bounds(text, bounds):
        return bounds.found, bounds.notes
    _written_date(message, today, bounds)
    return bounds.found, bounds.notes


class _Bounds:
    """The range a question names, as it is read (``question_dates``): the bounds found and a note per bound."""

    def __init__(self) -> None:
        self.found = DateRange()
        self.notes: list[dict[str, str]] = []

    def note(self, field_: str, value: datetime, phrase: str) -> None:
        """Set one bound (``updated_after`` or ``updated_before``), written as ``phrase``."""
        setattr(self.found, "after" if field_ == "updated_after" else "before", value)
        self.found.phrase = self.found.phrase or phrase
        self.notes.append({"field": field_, "value": iso(value), "from": phrase})

    def period(self, start: date, end: date | None, phrase: str) -> None:
        """From the first day ``start`` to the first day after, ``end`` (None: no end)."""
        self.note("updated_after", _at(start), phrase)
        if end is not None:
            self.note("updated_before", _at(end), phrase)


def _relative(text: str, now: datetime, bounds: _Bounds) -> None:
    """A range relative to ``now``: "past 30 days", "past week", "last month" (the calendar month before this
    one; last week Monday to Monday), "this year" (since it began), "yesterday", "today", "recently" (90 days)."""
    today = now.date()
    if m := re.search(r"\b(?:last|past|previous) (\d+) (day|week|month|year)s?\b", text):
        bounds.note("updated_after", now - timedelta(days=int(m.group(1)) * UNIT_DAYS[m.group(2)]), m.group(0))
    elif m := re.search(r"\bpast (day|week|month|year)\b", text):
        bounds.note("updated_after", now - timedelta(days=UNIT_DAYS[m.group(1)]), m.group(0))
    elif m := re.search(r"\b(?:last|previous) (week|month|year)\b", text):
        unit = m.group(1)
        if unit == "week":  # Monday to Monday
            start = today - timedelta(days=today.weekday() + 7)
            bounds.period(start, start + timedelta(days=7), m.group(0))
        elif unit == "month":
            start = _add_months(today.replace(day=1), -1)
            bounds.period(start, today.replace(day=1), m.group(0))
        else:
            bounds.period(date(today.year - 1, 1, 1), date(today.year, 1, 1), m.group(0))
    elif m := re.search(r"\bthis (week|month|year)\b", text):
        unit = m.group(1)
        start = (
            today - timedelta(days=today.weekday())
            if unit == "week"
            else today.replace(day=1)
            if unit == "month"
            else date(today.year, 1, 1)
        )
        bounds.note("updated_after", _at(start), m.group(0))
    elif m := re.search(r"\byesterday\b", text):
        bounds.period(today - timedelta(days=1), today, m.group(0))
    elif m := re.search(r"\btoday\b", text):
        bounds.period(today, today + timedelta(days=1), m.group(0))
    elif m := re.search(r"\brecent(?:ly)?\b", text):
        bounds.note("updated_after", now - timedelta(days=90), m.group(0))


def _open_bounds(text: str, bounds: _Bounds) -> bool:
    """A bound written right before a date: "since / after / from / starting March 2026" (after: from the end of
    the period) and "before / until / till / through / prior to / up to 2026" (until, till, through, up to: to the
    end of it); whether one was found."""
    used: list[tuple[int, int]] = []
    if m := re.search(r"\b(since|after|from|starting) ", text):
        rest = find_period(text[m.end() :], bare_year=True)
        if rest and rest[1].start() == 0:
            p, pm = rest
            bounds.note(
                "updated_after", _at(p.end if m.group(1) == "after" else p.start), text[m.start() : m.end() + pm.end()]
            )
            used.append((m.start(), m.end() + pm.end()))
    if m := re.search(r"\b(before|until|till|through|prior to|up to) ", text):
        rest = find_period(text[m.end() :], bare_year=True)
        if rest and rest[1].start() == 0:
            p, pm = rest
            inclusive = m.group(1) in ("until", "till", "through", "up to")
            bounds.note("updated_before", _at(p.end if inclusive else p.start), text[m.start() : m.end() + pm.end()])
            used.append((m.start(), m.end() + pm.end()))
    return bool(used)


def _written_date(message: str, today: date, bounds: _Bounds) -> None:
    """The date written in the question, the whole period ("in September 2026", "2025": a year only between 1990
    and next year, and not an address or an amount); else a month alone, the latest such month that has begun
    ("in September", asked in November 2026)."""
    hit = find_period(message, bare_year=True)
    if hit is not None:
        p, pm = hit
        # "2000 Main Street" is an address and "$2000" an amount, not a year
        if p.precision != "year" or (
            1990 <= p.start.year <= today.year + 1 and not _NOT_A_YEAR.match(message[pm.end() :])
        ):
            bounds.period(p.start, p.end, _with_preposition(message, pm.start(), pm.end()).lower())
            return
    if m := re.search(rf"\b(?:in|during) ({MONTH_RE})(?!\s*,?\s*\d)", message.lower()):
        month = MONTHS[m.group(1).rstrip(".")]
        year = today.year if month <= today.month else today.year - 1
        start = date(year, month, 1)
        bounds.period(start, _add_months(start, 1), m.group(0))


# Meteorological seasons: the month each starts in and lasts three months from ("this fall": September-November).
SEASONS = {"spring": 3, "summer": 6, "fall": 9, "autumn": 9, "winter": 12}
_SEASON_RE = "|".join(SEASONS)
_ONWARD = re.compile(r"\s*(?:on|onwards?|forward|and later|or later)\b")
_TO = re.compile(r"\s*(?:to|until|till|through|thru|and|-|–)\s+")


def _month_period(text: str, today: date, may: bool = False) -> tuple[Period, int] | None:
    """A period written at the start of ``text``: a date with a year (``find_period``) or a month alone (the latest
    such month that has begun; "may" alone only where ``may``: "help from may be late"); with how many characters
    it took."""
    hit = find_period(text, bare_year=True)
    if hit is not None and hit[1].start() == 0:
        return hit[0], hit[1].end()
    if (m := re.match(rf"({'|'.join(_MONTH_NAMES)})\b(?!\s*,?\s*\d)", text)) and (may or m.group(1) != "may"):
        month = MONTHS[m.group(1).rstrip(".")]
        year = today.year if month <= today.month else today.year - 1
        return Period(date(year, month, 1), "month"), m.end()
    return None


def _season(which: str, name: str, year: str | None, today: date) -> tuple[date, date]:
    """The first day of a season and the first day after it: ``this`` (the latest one that has begun), ``last`` (the
    one before), or of a given year (winter 2025: December 2025 to February 2026)."""
    month = SEASONS[name]
    if year is not None:
        start = date(int(year), month, 1)
    else:
        start = date(today.year, month, 1)
        if start > today:
            start = start.replace(year=today.year - 1)
        if which == "last":
            start = start.replace(year=start.year - 1)
    return start, _add_months(start, 3)


def _named_span(text: str, today: date, period: Any) -> bool:
    """The ranges people write with a start and an end, and the periods "from" names: "from March to June 2026" and
    "between March and June" (both months whole), "from March 2026 on" (since), "minutes from March 2026" (that
    month: "from" says where the minutes come from, not since when), "this fall", "last winter", "in the summer of
    2025", "fall 2025". Calls ``period(start, end, phrase)``, or ``period(start, None, phrase)`` for an open end;
    whether one was found."""
    season = rf"\b(this|last|past|previous|in the|during the)\s+({_SEASON_RE})(?:\s+of\s+({YEAR_RE}))?\b"
    if m := re.search(season, text):
        which = "last" if m.group(1) in ("last", "past", "previous") else "this"
        start, end = _season(which, m.group(2), m.group(3), today)
        # "this winter" asked before it began means the one ahead, which nothing is dated in yet: no filter
        if which == "last" or m.group(3) or end > today:
            period(start, end, m.group(0))
            return True
        return False
    if m := re.search(rf"\b({_SEASON_RE})\s+({YEAR_RE})\b", text):
        start, end = _season("this", m.group(1), m.group(2), today)
        period(start, end, m.group(0))
        return True
    for m in re.finditer(r"\b(from|between) ", text):
        first = _month_period(text[m.end() :], today)
        if first is None:
            continue
        p, used = first
        at = m.end() + used
        if (to := _TO.match(text, at)) and (second := _month_period(text[to.end() :], today, may=True)):
            q, used2 = second
            if p.precision == "month" and q.precision != "month" and p.start.year != q.start.year:
                p = Period(p.start.replace(year=q.start.year), "month")  # "from March to June 2026": both in 2026
            if q.end > p.start:
                period(p.start, q.end, text[m.start() : to.end() + used2])
                return True
        if m.group(1) == "from":
            if onward := _ONWARD.match(text, at):
                period(p.start, None, text[m.start() : onward.end()])
            else:
                period(p.start, p.end, text[m.start() : at])
            return True
    return False


def _with_preposition(text: str, start: int, end: int) -> str:
    before = re.search(r"\b(?:in|during|on|of|for)\s+$", text[:start], re.IGNORECASE)
    return text[before.start() if before else start : end]


# --- the filter -------------------------------------------------------------------------------------------------------
def effective_dates(snap: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per chunk (snapshot order): the date it is filtered by (seconds: its document's date, else its commit
    time) and whether that is the document's own date."""
    updated = snap.columns["updated"]
    own = snap.columns.get("document_date")
    if own is None:
        return updated, np.zeros(updated.shape, dtype=bool)
    carried = ~np.isnan(own)
    return np.where(carried, own, updated), carried


def date_mask(snap: Any, after: datetime | None, before: datetime | None) -> np.ndarray:
    """Chunks whose date (document date, else commit time) lies in ``[after, before)``."""
    when, _ = effective_dates(snap)
    keep = np.ones(when.shape, dtype=bool)
    if after is not None:
        keep &= when >= after.timestamp()
    if before is not None:
        keep &= when < before.timestamp()
    return keep


def passage_date(metadata: dict[str, Any], commit_time: str | None) -> dict[str, str | None]:
    """What a passage shows of its date: the document's own, else the commit time (``date_source: commit``)."""
    if metadata.get("document_date"):
        return {"document_date": metadata["document_date"], "date_source": metadata.get("date_source")}
    return {"document_date": commit_time[:10] if commit_time else None, "date_source": "commit"}
