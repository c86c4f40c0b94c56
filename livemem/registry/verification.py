"""Verifying registry rows: every row is checked by named rules (``RULES``); a row with an ``error`` issue is left
out of the published slice, one with only ``warning`` / ``info`` issues is published and the issue reported, so bad
rows never stop good ones. Rows are normalised on the way (phone, e-mail domain, URL host, county as the ZIP data
spells it)."""

from __future__ import annotations

import hashlib
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
from livemem.registry.fields import CONTENT_FIELDS, DAY_S, FIELDS, ISSUE_COLUMNS, STATUSES, VERIFICATION_FIELDS
from livemem.registry.load import LoadedRows
from livemem.schemas import errors_for, load_schema

PHONE_EXT = re.compile(r"\s*(?:x|ext\.?|extension)\s*(\d{1,6})\s*$", re.IGNORECASE)
EMAIL = (
    r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    r"@((?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63})$"
)
URL = (
    r"^(?P<scheme>https?)://(?P<host>(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63})"
    r"(?P<port>:\d{1,5})?(?P<rest>[/?#]\S*)?$"
)


@dataclass
class Verification:
    """The outcome of verifying every row: rows normalised, what each became, and every issue."""

    rows: pd.DataFrame  # FIELDS normalised + source_row, valid, deprecated, status, content/verification hashes
    issues: pd.DataFrame  # ISSUE_COLUMNS
    checked_at: datetime

    @property
    def published(self) -> pd.DataFrame:
        return self.rows[self.rows["valid"] & ~self.rows["deprecated"]]

    def counts(self) -> dict[str, int]:
        rows = self.rows
        published = rows["valid"] & ~rows["deprecated"]
        by_status = rows.loc[published, "status"].value_counts()
        errors = self.issues[self.issues["severity"] == "error"]
        return {
            "rows_read": len(rows),
            "published": int(published.sum()),
            **{status: int(by_status.get(status, 0)) for status in STATUSES},
            "invalid": int((~rows["valid"]).sum()),
            "deprecated": int((rows["valid"] & rows["deprecated"]).sum()),
            "issues": len(self.issues),
            "error_issues": len(errors),
            "warnings": int((self.issues["severity"] == "warning").sum()),
        }

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
        mask = mask.fillna(False).astype(bool)
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

    def frame(self) -> pd.DataFrame:
        if not self.parts:
            return pd.DataFrame({c: pd.Series(dtype=object) for c in ISSUE_COLUMNS})
        out = pd.concat(self.parts, ignore_index=True)
        out["local_resource_id"] = out["local_resource_id"].map(lambda v: v if isinstance(v, str) else None)
        return out.sort_values(["source_row", "rule"], kind="stable").reset_index(drop=True)


def _strings(column: pd.Series) -> pd.Series:
    """Only the str values (other types are the schema rule's to report); missing elsewhere."""
    if pd.api.types.infer_dtype(column, skipna=True) in ("string", "empty"):
        return column  # the common case (CSV, Postgres text): no per-value check
    return column.where([isinstance(v, str) for v in column]).astype(object)


def _cut_zip(column: pd.Series) -> pd.Series:
    text = _strings(column).str.strip()
    return text.where(~text.str.fullmatch(r"\d{5}-\d{4}", na=False), text.str[:5])


def _coverage(value: Any) -> Any:
    """zip_coverage as a list of 5-digit strings in input order, without repeats (CSV: split on , ; or spaces)."""
    if value is None:
        return []
    if isinstance(value, str):
        value = value.replace(",", " ").replace(";", " ").replace("|", " ").split()
    if not isinstance(value, list):
        return value  # the schema rule reports it
    items = (
        (v.strip()[:5] if len(v.strip()) == 10 and v.strip()[5] == "-" else v.strip()) if isinstance(v, str) else v
        for v in value
    )
    return list(dict.fromkeys(items))


def _normalise_input(frame: pd.DataFrame) -> pd.DataFrame:
    rows = frame.copy()
    for name in FIELDS:
        if name == "zip_coverage":
            continue
        column = rows[name]
        strings = _strings(column)
        text = strings.str.strip()
        text = text.where(text.notna() & (text != ""), None)
        # non-strings stay as they are, for the schema rule to report
        rows[name] = text if strings is column else column.where(strings.isna(), text)
    rows["zip"] = rows["zip"].where(_cut_zip(rows["zip"]).isna(), _cut_zip(rows["zip"]))
    rows["zip_coverage"] = rows["zip_coverage"].map(_coverage)
    for name in ("resource_type", "verification_status"):
        text = _strings(rows[name])
        rows[name] = rows[name].where(text.isna(), text.str.lower().str.replace(r"[\s-]+", "_", regex=True))
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


def _schema_failures(rows: pd.DataFrame) -> dict[int, str]:
    from fastjsonschema import JsonSchemaException

    fast = _fast_validator()
    failures: dict[int, str] = {}
    columns = [rows[f].tolist() for f in FIELDS]
    extra = rows["__not_an_object__"].tolist() if "__not_an_object__" in rows.columns else None
    for i, values in enumerate(zip(*columns, strict=True)):
        if extra is not None and extra[i] is not None:
            failures[i] = f"(row): expected an object with the registry fields, got {extra[i]}"
            continue
        record = {k: v for k, v in zip(FIELDS, values, strict=True) if v is not None and v != []}
        try:
            fast(record)
        except JsonSchemaException:
            failures[i] = "; ".join(errors_for("local_resource", record))
    return failures


def verify(loaded: LoadedRows, cfg: RegistryConfig, now: datetime | None = None) -> Verification:
    """Check every row against every rule; normalise the fields the rules read."""
    now = (now or utc_now()).astimezone(UTC)
    rows = _normalise_input(loaded.frame)
    issues = _Issues(rows)
    idx = rows.index

    failures = _schema_failures(rows)
    schema_bad = pd.Series(False, index=idx)
    if failures:
        positions = list(failures)
        schema_bad.iloc[positions] = True
        issues.add("schema", "error", schema_bad, pd.Series([failures[p] for p in positions], index=idx[positions]))

    _check_phone(rows, issues)
    _check_email(rows, issues)
    _check_url(rows, issues)
    _check_zips(rows, issues, cfg.state)
    age_days = _check_dates(rows, issues, cfg, now)
    _check_duplicates(rows, issues)

    # deprecated rows leave the slice whatever else is wrong with them (their other issues are not reported)
    deprecated_ts = pd.to_datetime(rows["deprecated_at"], utc=True, errors="coerce", format="ISO8601")
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
        np.where(rows["last_verified_at"].notna(), "verified", "unverified"),
    )
    rows["verification_status"] = recorded
    rows["status"] = np.where(
        recorded != "verified",
        "unverified",
        np.where(age_days.isna(), "unverified", np.where(age_days > cfg.freshness_days, "stale", "verified")),
    )
    _hash_rows(rows)
    keep = [*FIELDS, "source_row", "valid", "deprecated", "status", "content_hash", "verification_hash"]
    return Verification(rows=rows[keep], issues=table, checked_at=now)


def _check_phone(rows: pd.DataFrame, issues: _Issues) -> None:
    raw = _strings(rows["contact_phone"])
    present = raw.notna()
    ext = raw.str.extract(PHONE_EXT, expand=False)
    main = raw.str.replace(PHONE_EXT, "", regex=True).str.strip()
    allowed = main.str.fullmatch(r"\+?[\d\s().\-/]+", na=False)
    digits = main.str.replace(r"\D", "", regex=True)
    digits = digits.where(~((digits.str.len() == 11) & digits.str.startswith("1")), digits.str[1:])
    ok = allowed & digits.str.fullmatch(r"[2-9]\d{2}[2-9]\d{6}", na=False)
    issues.add(
        "phone",
        "error",
        present & ~ok,
        "contact_phone " + raw.map(repr, na_action="ignore") + " is not a 10-digit North American number",
    )
    normal = "+1" + digits + ext.map(lambda e: f";ext={e}", na_action="ignore").fillna("")
    rows["contact_phone"] = rows["contact_phone"].where(~(present & ok), normal)


def _check_email(rows: pd.DataFrame, issues: _Issues) -> None:
    raw = _strings(rows["contact_email"])
    text = raw.str.replace(r"^mailto:", "", regex=True, case=False)
    present = raw.notna()
    ok = text.str.fullmatch(EMAIL, na=False) & (text.str.find("@") <= 64)
    issues.add(
        "email", "error", present & ~ok, "contact_email " + raw.map(repr, na_action="ignore") + " is not an address"
    )
    parts = text.str.rsplit("@", n=1)
    normal = parts.str[0] + "@" + parts.str[1].str.lower()
    rows["contact_email"] = rows["contact_email"].where(~(present & ok), normal)


def _check_url(rows: pd.DataFrame, issues: _Issues) -> None:
    raw = _strings(rows["url"])
    present = raw.notna()
    has_scheme = raw.str.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", na=False) & ~raw.str.match(r"^[^/:]+:\d", na=False)
    full = raw.where(has_scheme, "https://" + raw)
    parts = full.str.extract(re.compile(URL, re.IGNORECASE))
    ok = parts["host"].notna()
    issues.add("url", "error", present & ~ok, "url " + raw.map(repr, na_action="ignore") + " is not an http(s) address")
    normal = (
        parts["scheme"].str.lower()
        + "://"
        + parts["host"].str.lower()
        + parts["port"].fillna("")
        + parts["rest"].fillna("")
    )
    rows["url"] = rows["url"].where(~(present & ok), normal)


def _check_zips(rows: pd.DataFrame, issues: _Issues, state: str) -> None:
    data = zip_data()
    states, county_of, in_use = zip_columns()
    zips = _strings(rows["zip"])
    well_formed = zips.str.fullmatch(r"\d{5}", na=False)  # other values: the schema rule reports them
    zip_state = zips.where(well_formed).map(states)
    known = zip_state.notna()
    zip_county = zips.where(well_formed).map(county_of)
    active = zips.where(well_formed).map(in_use).fillna(False).astype(bool)
    unknown = well_formed & ~known
    issues.add("zip_in_state", "error", unknown, "ZIP " + zips + " does not exist")
    elsewhere = well_formed & known & (zip_state != state)
    issues.add("zip_in_state", "error", elsewhere, "ZIP " + zips + " is in " + zip_state + ", not " + state)
    retired = well_formed & known & (zip_state == state) & ~active
    issues.add("zip_in_state", "error", retired, "ZIP " + zips + " is no longer in use")

    counties = _strings(rows["county"])
    in_state = well_formed & known & (zip_state == state)
    key = counties.str.replace(COUNTY_WORD, "", regex=True).str.casefold()  # county_key, vectorised
    mismatch = in_state & counties.notna() & (key != zip_county.str.casefold())
    issues.add(
        "zip_county",
        "error",
        mismatch,
        "ZIP " + zips + " is in " + zip_county + " County, not " + counties + " County",
    )
    # publish the county as the ZIP data spells it (Fayette, not fayette county)
    names = state_counties(state)
    canonical = key.map(names.get, na_action="ignore")
    rows["county"] = rows["county"].where(canonical.isna(), canonical)

    def bad_coverage(value: Any) -> str | None:
        if not isinstance(value, list):
            return None
        problems = []
        for z in value:
            if not isinstance(z, str) or not re.fullmatch(r"\d{5}", z):
                continue  # schema
            found = data.get(z)
            if found is None:
                problems.append(f"{z} does not exist")
            elif found[0] != state:
                problems.append(f"{z} is in {found[0]}, not {state}")
            elif not found[2]:
                problems.append(f"{z} is no longer in use")
        return "zip_coverage: ZIP " + "; ZIP ".join(problems) if problems else None

    coverage = rows["zip_coverage"].map(bad_coverage)
    issues.add("zip_coverage", "error", coverage.notna(), coverage)


def _check_dates(rows: pd.DataFrame, issues: _Issues, cfg: RegistryConfig, now: datetime) -> pd.Series:
    """Parse the dates (normalised to ISO 8601 UTC), report unreadable, future and stale ones; return the age."""
    ages = pd.Series(np.nan, index=rows.index)
    for name in ("last_verified_at", "deprecated_at"):
        text = _strings(rows[name])
        pattern_ok = text.str.fullmatch(load_schema("local_resource")["properties"][name]["pattern"], na=False)
        parsed = pd.to_datetime(text.where(pattern_ok), utc=True, errors="coerce", format="ISO8601")
        issues.add("schema", "error", pattern_ok & parsed.isna(), name + ": " + text + " is not a valid date")
        rows[name] = rows[name].where(parsed.isna(), parsed.dt.strftime("%Y-%m-%dT%H:%M:%SZ"))
        if name == "last_verified_at":
            ages = (pd.Timestamp(now) - parsed).dt.total_seconds() / DAY_S
            future = ages < -1
            issues.add("freshness", "error", future, "last_verified_at " + text + " is in the future")
            stale = ages > cfg.freshness_days
            message = (
                "last verified "
                + ages.floordiv(1).map(lambda d: f"{int(d)}", na_action="ignore")
                + f" days ago (window {cfg.freshness_days} days): stale"
            )
            issues.add("freshness", "warning", stale, message)
    return ages


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


def _hash_rows(rows: pd.DataFrame) -> None:
    def joined(columns: Sequence[str]) -> list[str]:
        values = [
            [",".join(map(str, v)) if isinstance(v, list) else ("" if v is None else str(v)) for v in rows[c].tolist()]
            for c in columns
        ]
        return ["\x1f".join(t) for t in zip(*values, strict=True)]

    for name, columns in (
        ("content_hash", CONTENT_FIELDS),
        ("verification_hash", (*VERIFICATION_FIELDS, "deprecated_at")),
    ):
        rows[name] = [hashlib.blake2b(s.encode(), digest_size=12).hexdigest() for s in joined(columns)]
