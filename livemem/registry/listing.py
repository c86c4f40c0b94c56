"""What a directory listing says, as registry fields: phone cells as they are written, opening hours as one readable
line, source ids as registry ids. Shared by the HSDS importers (``hsds``, ``hsds_legacy``).

- ``parse_phones``: a phone cell as 211 exports write it ("(415) 621-2929 (24 hrs)", "800-447-8223 (toll-free,
  24 hrs)", "415-469-4550, ext. 228", "305-891-8850 xOPT2", two numbers in one cell, N11 lines "211") → one entry
  per number: the number as written, its extension and note where the text says so, and its type. Nothing is
  thrown away: a cell with no recognisable number is kept as one entry with the raw text (verification flags it).
- ``merge_schedules`` / ``hours_line``: one schedule row per weekday with the same hours → one entry with several
  days → "Mon–Fri 9:00–17:00; Sat 10:00–14:00".
- ``registry_id``: a source id (integer or text) as a ``local_resource_id``, the same every time.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any

DAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
DAY_LABELS = dict(zip(DAYS, ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"), strict=True))
_DAY_NAMES = {
    **{d: d for d in DAYS},
    **{name: code for code, names in zip(DAYS, (
        ("monday", "mon", "m"), ("tuesday", "tue", "tues", "tu"), ("wednesday", "wed", "w"),
        ("thursday", "thu", "thur", "thurs", "th"), ("friday", "fri", "f"), ("saturday", "sat", "sa"),
        ("sunday", "sun", "su"),
    ), strict=True) for name in names},
}  # fmt: skip
ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")

_NUMBER = re.compile(
    r"(?<![\d\w])(?:\+?1[\s.-]?)?(?:\(\d{3}\)\s*|\d{3}[\s.-]?)\d{3}[\s.-]?\d{4}(?!\d)"  # NANP, as written
    r"|(?<![\d\w-])[2-9]11(?![\d\w-])"  # N11 lines: 211, 311, 511, 711, 811, 911
    r"|(?<![\d\w])1?-?8[0-9]{2}-[A-Z]{3}-[A-Z0-9]{4}(?![\w])"  # vanity toll-free numbers: 1-800-FLA-LOVE
)
_EXT = re.compile(r"^[\s,;]*(?:ext\.?|extension|x|#)\s*[:.]?\s*([A-Za-z0-9]{1,10})\b", re.IGNORECASE)
_SEPARATORS = re.compile(r"^[\s,;/|&]+|[\s,;/|&]+$|^(?:or|and)\b\s*|\s*\b(?:or|and)$", re.IGNORECASE)
_TYPE_WORDS = (("fax", "fax"), ("tty", "textphone"), ("tdd", "textphone"), ("text", "text"), ("cell", "cell"))


def _note(text: str) -> str | None:
    """What is left around a number, as a note: separators, brackets and "or" taken off."""
    text = text.strip()
    for _ in range(3):
        text = _SEPARATORS.sub("", text).strip()
        if text.startswith("(") and text.endswith(")") and text.count("(") == 1:
            text = text[1:-1].strip()
    text = text.replace("(", "").replace(")", "").strip(" ,;:-–")
    return text or None


def parse_phones(
    text: str | None, *, extension: Any = None, phone_type: str | None = None, note: str | None = None
) -> list[dict[str, str | None]]:
    """A phone cell → entries ``{"number", "extension", "type", "note"}`` (see the module docstring); ``extension``,
    ``phone_type`` and ``note`` are what the record's own columns say (``phones.extension`` / ``type`` /
    ``description``). An empty cell gives []."""
    if text is None or not str(text).strip():
        return []
    text = " ".join(str(text).split())
    own_ext = _extension(extension)
    matches = list(_NUMBER.finditer(text))
    if not matches:
        return [{"number": text, "extension": own_ext, "type": phone_type, "note": note}]
    lead = _note(text[: matches[0].start()])
    out: list[dict[str, str | None]] = []
    for i, match in enumerate(matches):
        tail = text[match.end() : matches[i + 1].start() if i + 1 < len(matches) else len(text)]
        ext = own_ext if i == 0 else None
        found = _EXT.match(tail)
        if found:
            ext, tail = found.group(1), tail[found.end() :]
        notes = [n for n in (lead if i == 0 else None, _note(tail), note) if n]
        joined = "; ".join(dict.fromkeys(notes)) or None
        kind = phone_type
        lowered = (joined or "").lower()
        for word, hsds_type in _TYPE_WORDS:
            if re.search(rf"\b{word}\b", lowered):
                kind = hsds_type
                break
        out.append({"number": match.group(0), "extension": ext, "type": kind, "note": joined})
    return out


def _extension(value: Any) -> str | None:
    if value is None or str(value).strip() == "":
        return None
    text = str(value).strip()
    return text[:-2] if re.fullmatch(r"\d+\.0", text) else text  # 228.0: a number column read as a float


def phone_text(phone: dict[str, Any]) -> str:
    """A phone entry as ``contact_phone`` text: the number, with `` x<ext>`` when the extension is digits."""
    ext = phone.get("extension")
    return phone["number"] + (f" x{ext}" if ext and str(ext).isdigit() else "")


# --- schedules ---------------------------------------------------------------------------------------------------
def day_code(value: Any) -> str | None:
    """``MO`` ... ``SU`` from an iCal code, an English day name or a number (1 = Monday ... 7 = Sunday, ISO 8601;
    0 is read as Sunday too)."""
    if value is None:
        return None
    text = str(value).strip()
    if re.fullmatch(r"\d+(?:\.0)?", text):
        n = int(float(text))
        return DAYS[n - 1] if 1 <= n <= 7 else ("SU" if n == 0 else None)
    return _DAY_NAMES.get(text.lower().rstrip(".")) or _DAY_NAMES.get(text.upper())


def day_codes(value: Any) -> list[str]:
    """Every day a cell names: ``MO,TU,WE`` or ``Monday`` or ``3``."""
    if value is None:
        return []
    return [d for part in re.split(r"[\s,;]+", str(value)) if (d := day_code(part))]


def clock(value: Any) -> str | None:
    """``HH:MM`` (24 h) from ``9:00``, ``09:00:00``, ``0900``, ``9am``, ``5:30 PM``; None when it is not a time."""
    if value is None:
        return None
    text = str(value).strip().lower().replace(".", "").replace(" ", "")
    match = re.fullmatch(r"(\d{1,2})(?::(\d{2}))?(?::\d{2})?(am|pm|a|p)?", text)
    if match:
        hour, minute, suffix = int(match.group(1)), int(match.group(2) or 0), match.group(3) or ""
    elif compact := re.fullmatch(r"(\d{2})(\d{2})", text):
        hour, minute, suffix = int(compact.group(1)), int(compact.group(2)), ""
    else:
        return None
    if suffix.startswith("p") and hour < 12:
        hour += 12
    if suffix.startswith("a") and hour == 12:
        hour = 0
    if hour > 24 or minute > 59:
        return None
    return f"{hour:02d}:{minute:02d}"


def merge_schedules(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Schedule entries ``{"days", "opens_at", "closes_at", "description"}`` with the same hours and text merged
    into one with all their days (Monday first); entries in the order their hours first appear."""
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for entry in entries:
        key = (entry.get("opens_at"), entry.get("closes_at"), entry.get("description"))
        if not any(key) and not entry.get("days"):
            continue
        target = merged.setdefault(key, {"days": [], "opens_at": key[0], "closes_at": key[1], "description": key[2]})
        target["days"] = [d for d in DAYS if d in {*target["days"], *(entry.get("days") or [])}]
    return list(merged.values())


def _day_ranges(days: list[str]) -> str:
    """``[MO, TU, WE, TH, FR, SA]`` → ``Mon–Sat``; gaps give commas (``Mon, Wed``)."""
    index = sorted(DAYS.index(d) for d in days)
    runs: list[list[int]] = []
    for i in index:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    labels = [
        DAY_LABELS[DAYS[r[0]]] if len(r) == 1 else f"{DAY_LABELS[DAYS[r[0]]]}–{DAY_LABELS[DAYS[r[-1]]]}" for r in runs
    ]
    return ", ".join(labels)


def _time_label(hhmm: str) -> str:
    return hhmm.lstrip("0") if not hhmm.startswith("00") else hhmm[1:]


def hours_line(schedules: list[dict[str, Any]]) -> str | None:
    """The merged schedules as one readable line: ``Mon–Fri 9:00–17:00; Sat 10:00–14:00``; a text-only schedule is
    its text, once however many rows repeat it."""
    parts: list[str] = []
    for s in schedules:
        days = _day_ranges(s.get("days") or [])
        opens, closes = s.get("opens_at"), s.get("closes_at")
        times = "–".join(_time_label(t) for t in (opens, closes) if t)
        if times:
            text = " ".join(p for p in (days, times) if p)
            if s.get("description") and not re.search(r"\d", s["description"]):  # "by appointment", not "9am-5pm"
                text += f" ({s['description']})"
        else:
            text = s.get("description") or (f"{days}" if days else "")
        if text and text not in parts:
            parts.append(text)
    return "; ".join(parts) or None


def structured(schedules: list[dict[str, Any]]) -> bool:
    """Whether merged schedules have structure (days or times); a text-only schedule is just its hours line."""
    return any(e["days"] or e["opens_at"] or e["closes_at"] for e in schedules)


def access_text(text: str | None, details: str | None) -> str:
    """An accessibility record as one phrase: its text, then its details in brackets (``Ramp (north door)``)."""
    return " ".join(p for p in (text, f"({details})" if details else None) if p)


# --- ids ---------------------------------------------------------------------------------------------------------
def registry_id(source_id: Any, prefix: str = "hsds-") -> str:
    """A source id as a registry id (``local_resource_id``): kept as it is when it fits the pattern (``136``,
    ``svc.12``), else its characters outside ``[A-Za-z0-9._:-]`` replaced, ``prefix`` added when it does not start
    with a letter or digit, and a short hash of the original appended (two ids never become one)."""
    text = str(source_id).strip()
    if ID_PATTERN.match(text):
        return text
    clean = re.sub(r"[^A-Za-z0-9._:-]+", "-", text).strip("-")
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    if not clean[:1].isalnum():
        clean = prefix + clean
    return f"{clean[:110]}-{digest}".replace("--", "-")


def unique(values: Iterable[str | None]) -> list[str]:
    """The non-empty values, stripped, once each, in order."""
    return list(dict.fromkeys(v.strip() for v in values if v and v.strip()))
