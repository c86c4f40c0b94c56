"""The registry row: its fields (``schemas/local_resource.schema.json``), resource types, statuses, the tables a
verification stages, and the rules that check a row."""

from __future__ import annotations

from livemem.schemas import load_schema

FIELDS: tuple[str, ...] = tuple(load_schema("local_resource")["properties"])
RESOURCE_TYPES: tuple[str, ...] = tuple(load_schema("local_resource")["properties"]["resource_type"]["enum"])
VERIFICATION_FIELDS = ("verification_status", "last_verified_at", "verified_by")
CONTENT_FIELDS = tuple(f for f in FIELDS if f not in (*VERIFICATION_FIELDS, "deprecated_at"))
STATUSES = ("verified", "stale", "unverified")
HISTORY_CHANGES = ("created", "updated", "verified", "deprecated", "restored", "removed")
DAY_S = 86_400.0

# rule name -> what it checks (the severity is per issue: error drops the row, warning / info only report)
RULES: dict[str, str] = {
    "schema": "the row is valid per schemas/local_resource.schema.json (required fields, types, vocabulary, dates)",
    "phone": "contact_phone is a well-formed North American number (published as +1XXXXXXXXXX)",
    "email": "contact_email is a well-formed address (domain published in lower case)",
    "url": "url is a well-formed http(s) address (scheme and host published in lower case)",
    "zip_in_state": "zip exists, is in use and lies in the configured state",
    "zip_county": "zip lies in the row's county (ZIP data of the zipcodes package)",
    "zip_coverage": "every zip_coverage ZIP exists and lies in the configured state",
    "freshness": "last_verified_at is not in the future and not older than freshness_days (warning: stale)",
    "duplicate_id": "local_resource_id is used by one row only (later rows are dropped)",
    "duplicate_program": "no other id has the same name, ZIP and resource_type (warning)",
    "deprecated": "rows with deprecated_at in the past leave the published slice (info)",
}


REGISTRY_COLUMNS = (*FIELDS, "status", "source_row", "content_hash")
ISSUE_COLUMNS = ("source_row", "local_resource_id", "rule", "severity", "message")
HISTORY_COLUMNS = (
    "local_resource_id", "change", "valid_from", "valid_to", "version_id", "content_hash", "verification_hash",
    "status", "last_verified_at", "deprecated_at", "note", "data",
)  # fmt: skip


# CSV cells a spreadsheet would run as a formula (OWASP "CSV injection"): a cell starting with one of these is
# written with a leading ``'`` (``csv_cell``), which spreadsheets show as text and hide; reading a registry CSV takes
# it off again (``csv_text``), so a file the project writes reads back exactly. Phone numbers in E.164 form
# (``+13045550101``) are prefixed too: a spreadsheet reads ``+1304...`` as a formula or a number, never as the text.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: str) -> str:
    """``value`` as a CSV cell no spreadsheet runs: prefixed with ``'`` when it starts (after any ``'``) with a
    formula character; ``csv_text(csv_cell(v)) == v`` for every string."""
    return "'" + value if value.lstrip("'")[:1] in FORMULA_STARTS else value


def csv_text(cell: str) -> str:
    """The value of a CSV cell written by ``csv_cell`` (a cell a spreadsheet saved with the same ``'`` too)."""
    return cell[1:] if cell.startswith("'") and cell.lstrip("'")[:1] in FORMULA_STARTS else cell
