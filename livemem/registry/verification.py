"""Verifying registry rows: every row is checked by named rules (``RULES``); a row with an ``error`` issue is left
out of the published slice, one with only ``warning`` / ``info`` issues is published and the issue reported, so bad
rows never stop good ones. Rows are normalised on the way (phones, e-mail domain, URL host, county as the ZIP data
spells it, the state, list fields).

A bad field is flagged, the program kept (``invalid_fields: flag``, the default): a phone, e-mail or web address
that fails its rule, or an optional field of the wrong type, is a ``warning`` on that field, left out of the
published row (set to null; its name is in the row's ``flagged_fields``, its value in the issue's message), and the
row is published. Only a row nobody could reach or find (no address, and no phone, e-mail or web address that
passed its rule: ``reachable``) or one whose required fields fail is left out. ``invalid_fields: reject`` makes
every such field an ``error`` (the row is left out), as before registry-v2.

Undated rows (no ``last_verified_at``) follow the registry's ``undated`` policy: ``hidden`` (unverified),
``unverified_shown`` (unverified, shown marked by the resolver), ``listed`` (verified as of ``listed_at``).
"""

from __future__ import annotations

import gc
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any

import numpy as np
import pandas as pd

from livemem.dates import utc_now
from livemem.geo.names import COUNTY_WORD
from livemem.geo.zips import state_counties, zip_columns, zip_data
from livemem.registry.config import RegistryConfig
from livemem.registry.fields import (
    CONTENT_FIELDS,
    DAY_S,
    FIELDS,
    ISSUE_COLUMNS,
    LIST_FIELDS,
    OBJECT_LISTS,
    REGISTRY_COLUMNS,
    REQUIRED,
    STATUSES,
    V2_FIELDS,
    VERIFICATION_FIELDS,
    encode_published,
)
from livemem.registry.load import LoadedRows
from livemem.registry.phones import clean_note, parse_phone, published_number
from livemem.schemas import json_path, load_schema, validator

EMAIL = (
    r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    r"@((?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63})$"
)
URL = (
    r"^(?P<scheme>https?)://(?P<host>(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63})"
    r"(?P<port>:\d{1,5})?(?P<rest>[/?#]\S*)?$"
)
WEB_ADDRESS = re.compile(r"^(?:https?://|www\.)\S+$|^[^@\s]+\.[A-Za-z]{2,63}(?:/\S*)?$", re.IGNORECASE)
# fields whose schema failure drops the row whatever ``invalid_fields`` says: the required ones, where the program
# serves (a wrong coverage ZIP gives wrong answers) and when it ended (a dropped end date would publish it again)
STRICT_FIELDS = (*REQUIRED, "zip_coverage", "deprecated_at")
DATE_FIELDS = ("last_verified_at", "listed_at", "deprecated_at")
LEFT_OUT = ": left out of the published row (the program is kept)"


@dataclass
class Verification:
    """The outcome of verifying every row: rows normalised, what each became, and every issue."""

    rows: pd.DataFrame  # FIELDS normalised + source_row, valid, deprecated, status, verified_as_of, flagged_fields,
    # content/verification hashes
    issues: pd.DataFrame  # ISSUE_COLUMNS
    checked_at: datetime
    undated: str = "hidden"

    @property
    def published(self) -> pd.DataFrame:
        return self.rows[self.rows["valid"] & ~self.rows["deprecated"]]

    def published_table(self) -> pd.DataFrame:
        """The published rows as the ``registry`` table stores them (REGISTRY_COLUMNS; object lists as JSON)."""
        table = self.published[list(REGISTRY_COLUMNS)].copy()
        for name in OBJECT_LISTS:
            table[name] = [encode_published(name, v) for v in table[name].tolist()]
        return table

    def counts(self) -> dict[str, int]:
        rows = self.rows
        published = rows["valid"] & ~rows["deprecated"]
        by_status = rows.loc[published, "status"].value_counts()
        errors = self.issues[self.issues["severity"] == "error"]
        undated = published & rows["last_verified_at"].isna()
        return {
            "rows_read": len(rows),
            "published": int(published.sum()),
            **{status: int(by_status.get(status, 0)) for status in STATUSES},
            "undated": int(undated.sum()),
            "as_listed": int((undated & rows["verified_as_of"].notna()).sum()),
            "invalid": int((~rows["valid"]).sum()),
            "deprecated": int((rows["valid"] & rows["deprecated"]).sum()),
            "flagged_rows": int((published & (rows["flagged_fields"].map(len) > 0)).sum()),
            "issues": len(self.issues),
            "error_issues": len(errors),
            "warnings": int((self.issues["severity"] == "warning").sum()),
        }

    def flagged_by_field(self) -> dict[str, int]:
        """field -> published rows in which it was flagged and left out (``invalid_fields: flag``)."""
        published = self.published
        out: dict[str, int] = {}
        for fields in published["flagged_fields"]:
            for name in fields:
                out[name] = out.get(name, 0) + 1
        return dict(sorted(out.items()))

    def issues_by_rule(self) -> dict[str, dict[str, int]]:
        """rule -> {severity: count} (only rules that found something)."""
        out: dict[str, dict[str, int]] = {}
        for (rule, severity), n in self.issues.groupby(["rule", "severity"]).size().items():
            out.setdefault(str(rule), {})[str(severity)] = int(n)
        return out

    def digest(self) -> str:
        """Changes whenever the verified result (which rows, with which status) changes."""
        h = hashlib.sha256()
        for column in ("content_hash", "verification_hash", "status"):
            h.update("\x1f".join(self.rows[column].astype(str)).encode())
        h.update("".join("1" if v else "0" for v in self.rows["valid"] & ~self.rows["deprecated"]).encode())
        return h.hexdigest()[:32]


class _Issues:
    """Issues found column-wise: each rule adds a mask of rows and their messages."""

    def __init__(self, rows: pd.DataFrame) -> None:
        self.rows = rows
        self.parts: list[pd.DataFrame] = []

    def add(self, rule: str, severity: str, mask: pd.Series, message: pd.Series | str) -> None:
        mask = pd.Series(mask, index=self.rows.index).fillna(False).astype(bool)
        if not mask.any():
            return
        messages = message[mask] if isinstance(message, pd.Series) else pd.Series(message, index=mask[mask].index)
        self.parts.append(
            pd.DataFrame(
                {
                    "source_row": self.rows.loc[mask, "source_row"],
                    "local_resource_id": self.rows.loc[mask, "local_resource_id"],
                    "rule": rule,
                    "severity": severity,
                    "message": messages.astype(str),
                }
            )
        )

    def add_rows(self, rule: str, found: dict[int, tuple[str, str]]) -> None:
        """Issues of single rows: position -> (severity, message)."""
        for severity in ("error", "warning", "info"):
            picked = {p: m for p, (sev, m) in found.items() if sev == severity}
            if picked:
                mask = pd.Series(False, index=self.rows.index)
                mask.iloc[list(picked)] = True
                index = self.rows.index[list(picked)]
                self.add(rule, severity, mask, pd.Series(list(picked.values()), index=index))

    def frame(self) -> pd.DataFrame:
        if not self.parts:
            return pd.DataFrame({c: pd.Series(dtype=object) for c in ISSUE_COLUMNS})
        out = pd.concat(self.parts, ignore_index=True)
        out["local_resource_id"] = out["local_resource_id"].map(lambda v: v if isinstance(v, str) else None)
        return out.sort_values(["source_row", "rule"], kind="stable").reset_index(drop=True)


class _Flags:
    """Fields flagged and left out, per row position (``invalid_fields: flag``)."""

    def __init__(self, cfg: RegistryConfig, rows: pd.DataFrame) -> None:
        self.flag = cfg.invalid_fields == "flag"
        self.severity = "warning" if self.flag else "error"
        self.fields: list[list[str]] = [[] for _ in range(len(rows))]
        self.rows = rows

    def drop(self, position: int, name: str) -> None:
        """Leave ``name`` out of the row at ``position`` (flag mode; reject mode drops the row instead)."""
        if not self.flag:
            return
        self.rows.iloc[position, self.rows.columns.get_loc(name)] = [] if name in LIST_FIELDS else None
        if name not in self.fields[position]:
            self.fields[position].append(name)

    def message(self, text: str) -> str:
        return text + LEFT_OUT if self.flag else text


def _strings(column: pd.Series) -> pd.Series:
    """Only the str values (other types are the schema rule's to report); missing elsewhere."""
    if pd.api.types.infer_dtype(column, skipna=True) in ("string", "empty"):
        return column.astype(object)  # the common case (CSV, Postgres text): no per-value check
    return column.where([isinstance(v, str) for v in column]).astype(object)


def _cut_zip(column: pd.Series) -> pd.Series:
    text = _strings(column).str.strip()
    return text.where(~text.str.fullmatch(r"\d{5}-\d{4}", na=False), text.str[:5])


def _coverage(value: Any) -> Any:
    """zip_coverage as a list of 5-digit strings in input order, without repeats (CSV: split on , ; or spaces)."""
    if value is None:
        return []
    if isinstance(value, str):
        if value.strip().startswith("["):
            value = _json_cell(value)
        else:
            value = value.replace(",", " ").replace(";", " ").replace("|", " ").split()
    if isinstance(value, tuple | np.ndarray):
        value = list(value)
    if not isinstance(value, list):
        return value  # the schema rule reports it
    items = (
        (v.strip()[:5] if len(v.strip()) == 10 and v.strip()[5] == "-" else v.strip()) if isinstance(v, str) else v
        for v in value
    )
    return list(dict.fromkeys(items))


def _json_cell(text: str) -> Any:
    """A CSV cell holding JSON; the text itself when it is not JSON (the schema rule reports it)."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return text


def _list_value(name: str, value: Any) -> Any:
    """A list field as a list: JSON (file or CSV cell), Postgres arrays, or (string lists) separated text."""
    if value is None:
        return []
    if isinstance(value, tuple | np.ndarray):
        value = list(value)
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return []
        if text[0] in "[{":
            value = _json_cell(text)
        elif name == "resource_types":
            value = re.split(r"[\s,;|]+", text)
        elif name == "languages":
            value = re.split(r"\s*[,;|]\s*", text)
        elif name == "phones":
            value = [{"number": text}]  # a plain phone cell: parsed like contact_phone
        elif name == "taxonomy_terms":
            value = [{"name": t} for t in re.split(r"\s*[;|]\s*", text) if t]
        else:
            return value  # schedules as text: the schema rule reports it
    if isinstance(value, dict) and name in OBJECT_LISTS:
        value = [value]
    if not isinstance(value, list):
        return value
    if name in OBJECT_LISTS:
        return [{k: v for k, v in item.items() if v not in (None, "")} if isinstance(item, dict) else item
                for item in value]  # fmt: skip
    items = [v.strip() if isinstance(v, str) else v for v in value]
    if name == "resource_types":
        items = [re.sub(r"[\s-]+", "_", v.lower()) if isinstance(v, str) else v for v in items]
    return list(dict.fromkeys(v for v in items if v != ""))


def _normalise_input(frame: pd.DataFrame) -> pd.DataFrame:
    rows = frame.copy()
    for name in FIELDS:
        if name in LIST_FIELDS:
            continue
        column = rows[name]
        strings = _strings(column)
        text = strings.str.strip()
        text = text.where(text.notna() & (text != ""), None)
        # non-strings stay as they are, for the schema rule to report
        rows[name] = text if strings is column else column.where(strings.isna(), text)
    rows["zip"] = rows["zip"].where(_cut_zip(rows["zip"]).isna(), _cut_zip(rows["zip"]))
    rows["zip_coverage"] = rows["zip_coverage"].map(_coverage).astype(object)
    for name in LIST_FIELDS:
        if name != "zip_coverage":
            rows[name] = pd.Series([_list_value(name, v) for v in rows[name].tolist()], index=rows.index, dtype=object)
    for name in ("resource_type", "verification_status"):
        text = _strings(rows[name])
        rows[name] = rows[name].where(text.isna(), text.str.lower().str.replace(r"[\s-]+", "_", regex=True))
    text = _strings(rows["state"])
    rows["state"] = rows["state"].where(text.isna(), text.str.upper())
    text = _strings(rows["county"])
    rows["county"] = rows["county"].where(
        text.isna(), text.str.replace(r"\s+", " ", regex=True).str.replace(COUNTY_WORD, "", regex=True)
    )
    rows["source_row"] = np.arange(1, len(rows) + 1)
    return rows


@cache
def _fast_validator():
    """fastjsonschema's compiled validator: about 20 times faster than jsonschema, used to find the few rows
    whose every problem jsonschema then spells out."""
    import fastjsonschema

    return fastjsonschema.compile(load_schema("local_resource"))


def _record(values: Sequence[Any]) -> dict[str, Any]:
    return {k: v for k, v in zip(FIELDS, values, strict=True) if v is not None and not (isinstance(v, list) and not v)}


def _check_schema(rows: pd.DataFrame, issues: _Issues, flags: _Flags) -> None:
    """Every violation of a row in one message: an ``error`` when a required (or strict) field fails or in reject
    mode; otherwise a ``warning`` and the failing fields (or list items) are left out."""
    from fastjsonschema import JsonSchemaException

    fast = _fast_validator()
    found: dict[int, tuple[str, str]] = {}
    columns = [rows[f].tolist() for f in FIELDS]
    extra = rows["__not_an_object__"].tolist() if "__not_an_object__" in rows.columns else None
    for i, values in enumerate(zip(*columns, strict=True)):
        if extra is not None and extra[i] is not None:
            found[i] = ("error", f"(row): expected an object with the registry fields, got {extra[i]}")
            continue
        record = _record(values)
        try:
            fast(record)
            continue
        except JsonSchemaException:
            pass
        errors = sorted(validator("local_resource").iter_errors(record), key=lambda e: list(map(str, e.absolute_path)))
        text = "; ".join(f"{json_path(e.absolute_path)}: {e.message}" for e in errors)
        fields = {e.absolute_path[0] if e.absolute_path else None for e in errors}
        if not flags.flag or fields & {None, *STRICT_FIELDS}:
            found[i] = ("error", text)
            continue
        found[i] = ("warning", text + LEFT_OUT)
        items: dict[str, set[int]] = {}
        for e in errors:
            path = list(e.absolute_path)
            if path[0] in LIST_FIELDS and len(path) > 1 and isinstance(path[1], int):
                items.setdefault(path[0], set()).add(path[1])
            else:
                items[path[0]] = set()  # the whole field
        for name, bad in items.items():
            value = rows.iloc[i, rows.columns.get_loc(name)]
            if bad and isinstance(value, list):
                kept = [v for k, v in enumerate(value) if k not in bad]
                rows.iloc[i, rows.columns.get_loc(name)] = kept
                if kept:
                    flags.fields[i].append(name)
                    continue
            flags.drop(i, name)
    issues.add_rows("schema", found)


def verify(loaded: LoadedRows, cfg: RegistryConfig, now: datetime | None = None) -> Verification:
    """Check every row against every rule; normalise the fields the rules read."""
    # the per-row passes allocate millions of small objects that live to the end: the cyclic collector, run again
    # and again over them, would take a third of the time (nothing here makes cycles)
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _verify(loaded, cfg, now)
    finally:
        if enabled:
            gc.enable()


def _verify(loaded: LoadedRows, cfg: RegistryConfig, now: datetime | None) -> Verification:
    now = (now or utc_now()).astimezone(UTC)
    rows = _normalise_input(loaded.frame)
    issues = _Issues(rows)
    flags = _Flags(cfg, rows)

    _check_schema(rows, issues, flags)
    _check_phone(rows, issues, flags)
    _check_email(rows, issues, flags)
    _check_url(rows, issues, flags)
    _check_reachable(rows, issues)
    _check_zips(rows, issues, cfg.covered_states)
    age_days, verified_as_of = _check_dates(rows, issues, flags, cfg, now)
    _check_duplicates(rows, issues)

    # deprecated rows leave the slice whatever else is wrong with them (their other issues are not reported)
    deprecated_ts = _parse_dates(rows["deprecated_at"])
    id_ok = _strings(rows["local_resource_id"]).str.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}", na=False)
    deprecated = (deprecated_ts <= now).fillna(False) & id_ok & ~rows["__dup"]
    table = issues.frame()
    if deprecated.any():
        gone = set(rows.loc[deprecated, "source_row"])
        table = table[~table["source_row"].isin(gone)]
        extra = _Issues(rows)
        when = rows["deprecated_at"].astype(str)
        extra.add("deprecated", "info", deprecated, "deprecated since " + when + ": left out of the published slice")
        table = pd.concat([table, extra.frame()], ignore_index=True).sort_values(["source_row", "rule"])
        table = table.reset_index(drop=True)
    scheduled = (deprecated_ts > now).fillna(False)
    if scheduled.any():
        later = _Issues(rows)
        later.add("deprecated", "info", scheduled, "ends on " + rows["deprecated_at"].astype(str) + ": still published")
        table = pd.concat([table, later.frame()], ignore_index=True).sort_values(["source_row", "rule"])
        table = table.reset_index(drop=True)

    bad_rows = set(table.loc[table["severity"] == "error", "source_row"])
    rows["valid"] = ~rows["source_row"].isin(bad_rows) | deprecated
    rows["deprecated"] = deprecated
    recorded = rows["verification_status"].where(
        rows["verification_status"].notna(),
        np.where(verified_as_of.notna(), "verified", "unverified"),
    )
    rows["verification_status"] = recorded
    rows["verified_as_of"] = verified_as_of
    rows["status"] = np.where(
        recorded != "verified",
        "unverified",
        np.where(age_days.isna(), "unverified", np.where(age_days > cfg.freshness_days, "stale", "verified")),
    )
    rows["flagged_fields"] = pd.Series([sorted(f) for f in flags.fields], index=rows.index, dtype=object)
    _hash_rows(rows)
    _derive(rows)
    keep = [*FIELDS, "source_row", "valid", "deprecated", "status", "verified_as_of", "flagged_fields",
            "content_hash", "verification_hash"]  # fmt: skip
    return Verification(rows=rows[keep], issues=table, checked_at=now, undated=cfg.undated)


def _phone_entries(value: str, given: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """The numbers of one phone text (with what its record's own columns say: extension, type, note)."""
    parsed, problem = parse_phone(value)
    given = given or {}
    out = []
    for k, phone in enumerate(parsed):
        ext = phone["extension"] or (str(given["extension"]).strip() if given.get("extension") and k == 0 else None)
        note = phone["note"]
        if ext and not ext.isdigit():  # "xOPT2": a menu choice, not an extension
            note = ", ".join(p for p in (note, f"option {ext.removeprefix('OPT').removeprefix('opt')}") if p)
            ext = None
        own = clean_note(given.get("note")) if k == 0 else None
        note = ", ".join(dict.fromkeys(p for p in (*(note or "").split(", "), *(own or "").split(", ")) if p)) or None
        out.append({"number": phone["number"], "extension": ext, "type": given.get("type") or phone["type"],
                    "note": note})  # fmt: skip
    return out, problem


def _check_phone(rows: pd.DataFrame, issues: _Issues, flags: _Flags) -> None:
    """contact_phone and phones parsed (notes, extensions, several numbers, N11 lines); contact_phone published as
    the first voice number (``+13045550101;ext=2``, ``211``), phones as every number."""
    found: dict[int, tuple[str, str]] = {}
    contacts: list[Any] = []
    all_phones: list[list[dict[str, Any]]] = []
    for i, (cell, listed) in enumerate(zip(rows["contact_phone"].tolist(), rows["phones"].tolist(), strict=True)):
        numbers: list[dict[str, Any]] = []
        problems: list[str] = []
        if isinstance(cell, str):
            parsed, problem = _phone_entries(cell)
            numbers += parsed
            if problem and not parsed:
                problems.append(f"contact_phone {cell!r} is not a 10-digit North American number (nor an N11 line)")
            elif problem:
                problems.append(f"contact_phone {cell!r}: part of it is not a number ({problem}); the rest is kept")
        for k, item in enumerate(listed if isinstance(listed, list) else []):
            if not isinstance(item, dict) or not isinstance(item.get("number"), str):
                continue  # the schema rule reported it
            parsed, problem = _phone_entries(item["number"], item)
            numbers += parsed
            if problem:
                problems.append(
                    f"phones[{k}] {item['number']!r} is not a 10-digit North American number (nor an N11 line)"
                    if not parsed
                    else f"phones[{k}] {item['number']!r}: part of it is not a number ({problem}); the rest is kept"
                )
        unique = _merged_phones(numbers)
        if problems:
            found[i] = (flags.severity, flags.message("; ".join(problems)))
            if flags.flag and not unique:
                flags.fields[i].append("contact_phone" if isinstance(cell, str) else "phones")
        voice = [p for p in unique if p["type"] not in ("fax", "textphone", "text")] or unique
        contacts.append(published_number(voice[0]) if voice else None)
        all_phones.append(unique)
    issues.add_rows("phone", found)
    rows["contact_phone"] = pd.Series(contacts, index=rows.index, dtype=object)
    rows["phones"] = pd.Series(all_phones, index=rows.index, dtype=object)


def _merged_phones(numbers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each number once (by number and extension), where it first came, with the note a repeat gives when it has
    none (``contact_phone`` is the first listed phone without its note: the note must survive the merge)."""
    merged: dict[tuple[Any, Any], dict[str, Any]] = {}
    for phone in numbers:
        key = (phone["number"], phone["extension"])
        if key not in merged:
            merged[key] = dict(phone)
            continue
        if not merged[key].get("note") and phone.get("note"):
            merged[key]["note"] = phone["note"]
    return list(merged.values())


def _check_email(rows: pd.DataFrame, issues: _Issues, flags: _Flags) -> None:
    """contact_email well formed (domain in lower case); a web address there moves to url when url is empty."""
    found: dict[int, tuple[str, str]] = {}
    moved: dict[int, tuple[str, str]] = {}
    emails = rows["contact_email"].tolist()
    urls = rows["url"].tolist()
    out: list[Any] = []
    for i, raw in enumerate(emails):
        if not isinstance(raw, str):
            out.append(raw)
            continue
        text = re.sub(r"^mailto:", "", raw, flags=re.IGNORECASE)
        if re.fullmatch(EMAIL, text) and text.find("@") <= 64:
            local, domain = text.rsplit("@", 1)
            out.append(local + "@" + domain.lower())
            continue
        if WEB_ADDRESS.match(text) and "@" not in text and not isinstance(urls[i], str):
            urls[i] = text  # checked by the url rule next
            moved[i] = ("warning", f"contact_email {raw!r} is a web address: moved to url (contact_email left empty)")
            out.append(None)
            continue
        found[i] = (flags.severity, flags.message(f"contact_email {raw!r} is not an address"))
        out.append(raw if not flags.flag else None)
        flags.drop(i, "contact_email")
    issues.add_rows("email", {**found, **moved})
    rows["contact_email"] = pd.Series(out, index=rows.index, dtype=object)
    rows["url"] = pd.Series(urls, index=rows.index, dtype=object)


def _check_url(rows: pd.DataFrame, issues: _Issues, flags: _Flags) -> None:
    raw = _strings(rows["url"])
    present = raw.notna()
    has_scheme = raw.str.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", na=False) & ~raw.str.match(r"^[^/:]+:\d", na=False)
    full = raw.where(has_scheme, "https://" + raw)
    parts = full.str.extract(re.compile(URL, re.IGNORECASE))
    ok = parts["host"].notna()
    bad = present & ~ok
    issues.add(
        "url",
        flags.severity,
        bad,
        raw.map(lambda v: flags.message(f"url {v!r} is not an http(s) address"), na_action="ignore"),
    )
    normal = (
        parts["scheme"].str.lower()
        + "://"
        + parts["host"].str.lower()
        + parts["port"].fillna("")
        + parts["rest"].fillna("")
    )
    rows["url"] = rows["url"].where(~(present & ok), normal)
    for i in np.flatnonzero(bad.to_numpy()):
        flags.drop(int(i), "url")


def _check_reachable(rows: pd.DataFrame, issues: _Issues) -> None:
    """A program nobody could reach or find: no address and no phone, e-mail or web address left."""
    none = pd.Series(True, index=rows.index)
    for name in ("address", "contact_phone", "contact_email", "url"):
        none &= _strings(rows[name]).isna()
    issues.add(
        "reachable",
        "error",
        none,
        "no address and no phone, e-mail or web address that passed its rule: nobody could reach or find this program",
    )


def _check_zips(rows: pd.DataFrame, issues: _Issues, states: tuple[str, ...]) -> None:
    """Each ZIP exists, lies in a configured state and is in use; the county is the ZIP's and the state the ZIP's
    (both published as the ZIP data has them); the ZIPs of the coverage pass the same checks."""
    data = zip_data()
    zip_states, county_of, in_use = zip_columns()
    zips = _strings(rows["zip"])
    well_formed = zips.str.fullmatch(r"\d{5}", na=False)  # other values: the schema rule reports them
    zip_state = zips.where(well_formed).map(zip_states)
    known = zip_state.notna()
    zip_county = zips.where(well_formed).map(county_of)
    active = zips.where(well_formed).map(in_use).fillna(False).astype(bool)
    covered = zip_state.isin(states)
    configured = (
        f"{states[0]} (registry.state; list more states in registry.states)"
        if len(states) == 1
        else f"one of the configured states {', '.join(states)} (registry.states)"
    )
    unknown = well_formed & ~known
    issues.add("zip_in_state", "error", unknown, "ZIP " + zips + " does not exist")
    elsewhere = well_formed & known & ~covered
    issues.add("zip_in_state", "error", elsewhere, "ZIP " + zips + " is in " + zip_state + ", not " + configured)
    retired = well_formed & known & covered & ~active
    issues.add("zip_in_state", "error", retired, "ZIP " + zips + " is no longer in use")
    in_state = well_formed & known & covered
    _check_zip_county(rows, issues, zips, zip_state, zip_county, in_state, states)
    _check_zip_state(rows, issues, zip_state, in_state)
    coverage = rows["zip_coverage"].map(lambda value: _bad_coverage(value, data, states, configured))
    issues.add("zip_coverage", "error", coverage.notna(), coverage)


def _check_zip_county(rows: pd.DataFrame, issues: _Issues, zips: pd.Series, zip_state: pd.Series,
                      zip_county: pd.Series, in_state: pd.Series, states: tuple[str, ...]) -> None:  # fmt: skip
    """A county other than its ZIP's is reported; the county is published as the ZIP data spells it (Fayette, not
    fayette county), in the ZIP's state."""
    counties = _strings(rows["county"])
    key = counties.str.replace(COUNTY_WORD, "", regex=True).str.casefold()  # county_key, vectorised
    mismatch = in_state & counties.notna() & (key != zip_county.str.casefold())
    issues.add(
        "zip_county",
        "error",
        mismatch,
        "ZIP " + zips + " is in " + zip_county + " County, not " + counties + " County",
    )
    names = {st: state_counties(st) for st in states}
    canonical = pd.Series(
        [names.get(st, {}).get(k) if isinstance(k, str) else None for st, k in zip(zip_state, key, strict=True)],
        index=rows.index,
        dtype=object,
    )
    rows["county"] = rows["county"].where(canonical.isna(), canonical)


def _check_zip_state(rows: pd.DataFrame, issues: _Issues, zip_state: pd.Series, in_state: pd.Series) -> None:
    """The row's state is its ZIP's: a row naming another state is reported, and published with its ZIP's."""
    given = _strings(rows["state"])
    differs = in_state & given.notna() & (given != zip_state)
    issues.add(
        "state",
        "warning",
        differs,
        "state " + given + " is not its ZIP's state " + zip_state + ": published as " + zip_state,
    )
    rows["state"] = rows["state"].where(~in_state, zip_state)


def _bad_coverage(value: Any, data: dict[str, Any], states: tuple[str, ...], configured: str) -> str | None:
    """What is wrong with the ZIPs of a row's coverage (none that exist, lie in a configured state and are in use
    is wrong), or None; values that are not ZIPs are the schema rule's."""
    if not isinstance(value, list):
        return None
    problems = []
    for z in value:
        if not isinstance(z, str) or not re.fullmatch(r"\d{5}", z):
            continue  # schema
        found = data.get(z)
        if found is None:
            problems.append(f"{z} does not exist")
        elif found[0] not in states:
            problems.append(f"{z} is in {found[0]}, not {configured}")
        elif not found[2]:
            problems.append(f"{z} is no longer in use")
    return "zip_coverage: ZIP " + "; ZIP ".join(problems) if problems else None


def _parse_dates(column: pd.Series) -> pd.Series:
    """ISO 8601 text (dates, date-times, offsets, mixed) as UTC timestamps; NaT for anything else, also when no
    row has a value (an all-empty column must not turn into floats)."""
    text = _strings(column)
    parsed = pd.to_datetime(pd.Series(text.tolist(), index=column.index, dtype=object), utc=True, errors="coerce",
                            format="ISO8601")  # fmt: skip
    return parsed.astype("datetime64[ns, UTC]")


def _check_dates(
    rows: pd.DataFrame, issues: _Issues, flags: _Flags, cfg: RegistryConfig, now: datetime
) -> tuple[pd.Series, pd.Series]:
    """Parse the dates (normalised to ISO 8601 UTC), report unreadable, future and stale ones; return the age in
    days of what the status rests on and that date (last_verified_at, or listed_at under ``undated: listed``)."""
    parsed: dict[str, pd.Series] = {}
    for name in DATE_FIELDS:
        text = _strings(rows[name])
        pattern_ok = text.str.fullmatch(load_schema("local_resource")["properties"][name]["pattern"], na=False)
        dates = _parse_dates(text.where(pattern_ok))
        unreadable = pattern_ok & dates.isna()
        severity = "error" if name == "deprecated_at" else flags.severity
        message = text.map(lambda v, n=name: f"{n}: {v} is not a valid date", na_action="ignore")
        issues.add("schema", severity, unreadable, message if severity == "error" else message + LEFT_OUT)
        for i in np.flatnonzero(unreadable.to_numpy()) if severity == "warning" else []:
            flags.drop(int(i), name)
        iso = dates.dt.strftime("%Y-%m-%dT%H:%M:%SZ").astype(object)
        rows[name] = rows[name].where(dates.isna(), iso)
        parsed[name] = dates
    verified = parsed["last_verified_at"]
    recorded = _strings(rows["verification_status"])
    as_listed = (
        verified.isna() & parsed["listed_at"].notna() & (recorded.isna() | (recorded == "verified"))
        if cfg.undated == "listed"
        else pd.Series(False, index=rows.index)
    )
    basis = verified.where(verified.notna(), parsed["listed_at"].where(as_listed))
    ages = ((pd.Timestamp(now) - basis).dt.total_seconds() / DAY_S).astype(float)
    text = _strings(rows["last_verified_at"])
    future = (ages < -1) & verified.notna()
    issues.add(
        "freshness", "error", future, text.map(lambda v: f"last_verified_at {v} is in the future", na_action="ignore")
    )
    stale = ages > cfg.freshness_days
    listed_text = _strings(rows["listed_at"]).str[:10]
    message = pd.Series(
        [
            (f"listed {lt} ({int(a)} days ago; undated: listed) and not verified since"
             if al else f"last verified {int(a)} days ago") + f" (window {cfg.freshness_days} days): stale"
            if a == a else ""
            for a, al, lt in zip(ages, as_listed, listed_text, strict=True)
        ],
        index=rows.index,
    )  # fmt: skip
    issues.add("freshness", "warning", stale, message)
    as_of = basis.dt.strftime("%Y-%m-%dT%H:%M:%SZ").astype(object).where(basis.notna(), None)
    return ages, as_of


def _check_duplicates(rows: pd.DataFrame, issues: _Issues) -> None:
    ids = _strings(rows["local_resource_id"])
    dup = ids.notna() & ids.duplicated(keep="first")
    first_row = rows.assign(_id=ids).groupby("_id")["source_row"].transform("min")
    issues.add(
        "duplicate_id",
        "error",
        dup,
        "local_resource_id " + ids + " is already used by row " + first_row.astype(str) + " (this row is dropped)",
    )
    rows["__dup"] = dup
    name_key = _strings(rows["name"]).str.casefold().str.replace(r"[^0-9a-z]+", "", regex=True)
    key = name_key + "|" + _strings(rows["zip"]) + "|" + _strings(rows["resource_type"])
    candidates = key.notna() & ids.notna() & ~dup
    same = candidates & key.where(candidates).duplicated(keep="first")
    first_id = rows.assign(_k=key.where(candidates), _id=ids).groupby("_k")["_id"].transform("first")
    issues.add(
        "duplicate_program",
        "warning",
        same,
        "same name, ZIP and resource_type as "
        + first_id.map(repr, na_action="ignore")
        + ": possible duplicate listing",
    )


def _says_more(name: str, value: Any, row: dict[str, Any]) -> bool:
    """Whether a registry-v2 field adds to what the v1 fields say (only then does it enter the hashes)."""
    if value is None or (isinstance(value, list) and not value):
        return False
    if name == "resource_types":
        return value != [row.get("resource_type")]
    if name == "phones":
        contact = row.get("contact_phone")
        return not (
            len(value) == 1
            and published_number(value[0]) == contact
            and not (value[0].get("type") or value[0].get("note"))
        )
    return name != "state"  # the state is the ZIP's (reported when the row says another)


def _hash_rows(rows: pd.DataFrame) -> None:
    """content_hash and verification_hash of each row; the registry-v2 fields enter only when they say more than
    the v1 fields, so a row verified before registry-v2 keeps its hashes (and its history no spurious change)."""
    values = {c: rows[c].tolist() for c in FIELDS}

    def text(v: Any) -> str:
        if isinstance(v, list):
            return ",".join(json.dumps(x, sort_keys=True) if isinstance(x, dict) else str(x) for x in v)
        return "" if v is None else str(v)

    def joined(columns: Sequence[str]) -> list[str]:
        v1 = ["\x1f".join(t) for t in zip(*([text(v) for v in values[c]] for c in columns if c not in V2_FIELDS),
                                           strict=True)]  # fmt: skip
        for c in (c for c in columns if c in V2_FIELDS):
            for i, v in enumerate(values[c]):
                if v is not None and v != [] and _says_more(c, v, {k: values[k][i] for k in _CONTEXT}):
                    v1[i] += f"\x1e{c}={text(v)}"
        return v1

    for name, columns in (
        ("content_hash", CONTENT_FIELDS),
        ("verification_hash", (*VERIFICATION_FIELDS, "deprecated_at")),
    ):
        rows[name] = [hashlib.blake2b(s.encode(), digest_size=12).hexdigest() for s in joined(columns)]


_CONTEXT = ("resource_type", "contact_phone")  # what _says_more compares with


def _derive(rows: pd.DataFrame) -> None:
    """What a published row always carries: resource_types with the primary type first."""
    rows["resource_types"] = pd.Series(
        [
            list(dict.fromkeys([p, *(t or [])])) if isinstance(p, str) else list(t or [])
            for p, t in zip(rows["resource_type"], rows["resource_types"], strict=True)
        ],
        index=rows.index,
        dtype=object,
    )
