"""Phone cells as registries write them, read into numbers: ``(415) 621-2929 (24 hrs)``, ``800-447-8223 (toll-free,
24 hrs)``, ``415-469-4550, ext. 228``, ``305-891-8850 xOPT2``, ``304-555-0100 / 304-555-0101``, ``1-800-273-TALK``,
N11 lines (``211``, ``311``) and ``988``.

``parse_phone(text)`` gives every number found in a cell, each ``{"number", "extension", "type", "note"}`` (number in
E.164 ``+1XXXXXXXXXX``, or the three digits of an N11 line), and what could not be read (None when all of it could).
Verification (``livemem.registry.verification``) publishes the first number as ``contact_phone`` and all of them as
``phones``; a cell with nothing readable is flagged on its field.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

# N11 lines (211 community services, 311 city services, 511 traffic, 711 relay, 811 dig-safe, 911) and 988
SHORT_LINES = frozenset({"211", "311", "411", "511", "611", "711", "811", "911", "988"})
NANP = re.compile(
    r"(?<![\dA-Za-z])(?:\+?1[\s.\-]*)?(?:\(\s*([2-9]\d{2})\s*\)|([2-9]\d{2}))[\s.\-]*([2-9]\d{2})[\s.\-]*(\d{4})(?!\d)"
)
VANITY = re.compile(  # 1-800-273-TALK: letters on the keypad (capitals only, so words are never read as numbers)
    r"(?<![\dA-Za-z])(?:\+?1[\s.\-]*)?\(?([2-9]\d{2})\)?[\s.\-]*([2-9A-Z][0-9A-Z]{2})[\s.\-]*([0-9A-Z]{4})(?![\dA-Za-z])"
)
SHORT = re.compile(r"(?<![\d])(211|311|411|511|611|711|811|911|988)(?![\d])")
EXTENSION = re.compile(r"(?:^|[\s,;])(?:x|ext\.?|extension|ext:)\s*#?\s*(\d{1,6})(?!\d)", re.IGNORECASE)
OPTION = re.compile(r"(?:x\s*)?(?:opt(?:ion)?|press)\.?\s*#?\s*(\d{1,2})(?!\d)", re.IGNORECASE)
LABEL = re.compile(r"^\s*(?:phone|tel(?:ephone)?|ph|call|number)\s*[:.#\-]?\s*", re.IGNORECASE)
KEYPAD = {
    c: d
    for d, letters in zip("23456789", ("ABC", "DEF", "GHI", "JKL", "MNO", "PQRS", "TUV", "WXYZ"), strict=True)
    for c in letters
}
NOTES = (  # how notes are written -> how they are published
    (re.compile(r"\b24\s*(?:/\s*7|hrs?\.?|hours?|-?\s*hour(?:s)?(?:\s+a\s+day)?)\b", re.IGNORECASE), "24 hours"),
    (re.compile(r"\btoll[\s-]*free\b", re.IGNORECASE), "toll-free"),
)
TYPES = (
    (re.compile(r"\bfax\b", re.IGNORECASE), "fax"),
    (re.compile(r"\b(?:tty|tdd)\b", re.IGNORECASE), "textphone"),
    (re.compile(r"\btext(?:\s+only)?\b", re.IGNORECASE), "text"),
)


def _split(text: str) -> list[str]:
    """The cell cut at ``/``, ``;``, ``|``, ``,``, `` or `` and `` and `` outside parentheses."""
    pieces, depth, current = [], 0, ""
    i = 0
    while i < len(text):
        c = text[i]
        depth += c == "("
        depth -= c == ")" and depth > 0
        word = re.match(r"\s+(?:or|and|&)\s+", text[i:], re.IGNORECASE) if depth == 0 else None
        if depth == 0 and (c in "/;|," or word):
            pieces.append(current)
            current = ""
            i += word.end() if word else 1
            continue
        current += c
        i += 1
    pieces.append(current)
    return [p for p in pieces if p.strip()]


def _has_number(piece: str) -> bool:
    digits = re.sub(r"\D", "", piece)
    return len(digits) >= 7 or bool(SHORT.fullmatch(digits)) or bool(VANITY.search(piece))


def _continues(piece: str) -> bool:
    """Whether a piece without a number belongs to the number before it (an extension, an option, a note)."""
    text = piece.strip()
    if not re.search(r"\d", text):
        return True
    return bool(
        re.match(r"(?:x|ext\.?|extension|ext:|opt(?:ion)?|press)\b|x\d", text, re.IGNORECASE)
        or any(pattern.search(text) for pattern, _ in NOTES)
    )


def _note(text: str) -> tuple[str | None, str | None]:
    """(note, type) of the words around a number."""
    found: list[tuple[int, str]] = []
    kind = None
    rest = text
    for pattern, label in NOTES:
        if match := pattern.search(rest):
            found.append((match.start(), label))
            rest = pattern.sub(" ", rest)
    notes = [label for _, label in sorted(found)]
    for pattern, label in TYPES:
        if kind is None and pattern.search(rest):
            kind = label
            rest = pattern.sub(" ", rest)
    rest = re.sub(r"[()\[\]]", " ", rest)
    rest = re.sub(r"\s+", " ", rest).strip(" ,;:-.")
    if re.search(r"[A-Za-z]", rest):
        notes.append(rest)
    return (", ".join(notes) or None), kind


def _one(piece: str) -> tuple[dict[str, Any] | None, str | None]:
    """The number of one piece (None and what is wrong when there is none)."""
    text = LABEL.sub("", piece).strip()
    extension = None
    option = None
    if found := OPTION.search(text):
        option = found.group(1)
        text = text[: found.start()] + " " + text[found.end() :]
    if found := EXTENSION.search(text):
        extension = found.group(1)
        text = text[: found.start()] + " " + text[found.end() :]
    number = None
    if found := NANP.search(text):
        number = "+1" + (found.group(1) or found.group(2)) + found.group(3) + found.group(4)
    elif (found := VANITY.search(text)) and re.search(r"[A-Z]", found.group(0)):
        digits = "".join(KEYPAD.get(c, c) for c in found.group(1) + found.group(2) + found.group(3))
        number = "+1" + digits if re.fullmatch(r"[2-9]\d{2}[2-9]\d{6}", digits) else None
    elif (found := SHORT.search(text)) and not re.search(r"\d", SHORT.sub("", text, count=1)):
        number = found.group(1)
    if number is None or found is None:
        return None, "no 10-digit North American number (nor an N11 line)"
    rest = text[: found.start()] + " " + text[found.end() :]
    if re.search(r"\d", re.sub(r"\b24\s*(?:/\s*7|-?\s*h)", "", rest, flags=re.IGNORECASE)):
        return None, "digits besides the number"
    note, kind = _note(rest)
    if option:
        note = f"{note}, option {option}" if note else f"option {option}"
    return {"number": number, "extension": extension, "type": kind, "note": note}, None


@lru_cache(maxsize=65_536)
def _parse(text: str) -> tuple[tuple[tuple[str, str | None, str | None, str | None], ...], str | None]:
    pieces: list[str] = []
    for piece in _split(text):
        if pieces and not _has_number(piece) and _continues(piece):
            pieces[-1] += " " + piece  # ", ext. 228", ", 24 hrs" belong to the number before
        else:
            pieces.append(piece)
    numbers: list[tuple[str, str | None, str | None, str | None]] = []
    problems: list[str] = []
    for piece in pieces:
        phone, problem = _one(piece)
        if phone is None:
            problems.append(f"{piece.strip()!r}: {problem}")
        else:
            numbers.append((phone["number"], phone["extension"], phone["type"], phone["note"]))
    return tuple(numbers), ("; ".join(problems) or None)


def parse_phone(text: str) -> tuple[list[dict[str, Any]], str | None]:
    """Every number in a phone cell (``{"number", "extension", "type", "note"}``, in the cell's order) and what could
    not be read (None: all of it was)."""
    numbers, problem = _parse(re.sub(r"\b24\s*/\s*7\b", "24 hours", text.strip()))
    return [{"number": n, "extension": e, "type": t, "note": o} for n, e, t, o in numbers], problem


def clean_note(text: str | None) -> str | None:
    """A source's phone note as published: "24 hrs" -> "24 hours", "toll free" -> "toll-free", the rest as written."""
    if text is None or not str(text).strip():
        return None
    note, kind = _note(re.sub(r"\b24\s*/\s*7\b", "24 hours", str(text)))
    return ", ".join(p for p in (kind, note) if p) or None


def published_number(phone: dict[str, Any]) -> str:
    """``+13045550101;ext=2`` (RFC 3966 extension), or an N11 line's three digits."""
    ext = phone.get("extension")
    return phone["number"] + (f";ext={ext}" if ext and str(ext).isdigit() else "")
