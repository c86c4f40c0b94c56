"""Helpers for the registry tests: rows, registry files and sources files in temp dirs."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from livemem.registry import FIELDS

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
RECENT = (NOW - timedelta(days=10)).date().isoformat()

# (zip, county) pairs of WV used for synthetic rows
PLACES = [
    ("25901", "Fayette"), ("25840", "Fayette"), ("25136", "Fayette"), ("25812", "Fayette"),
    ("25801", "Raleigh"), ("25918", "Raleigh"), ("25921", "Raleigh"), ("25880", "Raleigh"),
]  # fmt: skip


def good_row(i: int = 0, **overrides: Any) -> dict[str, Any]:
    zip_code, county = PLACES[i % len(PLACES)]
    row = {
        "local_resource_id": f"res-{i:05d}",
        "name": f"Community Program {i}",
        "description": "Help with groceries.",
        "resource_type": "food_pantry",
        "county": county,
        "zip": zip_code,
        "zip_coverage": "",
        "address": f"{i} Main Street",
        "contact_phone": f"304-555-01{i % 100:02d}",
        "contact_email": f"program{i}@example.org",
        "url": f"https://example.org/programs/{i}",
        "eligibility": "Open to all.",
        "hours": "Mon-Fri 9-5",
        "verification_status": "verified",
        "last_verified_at": RECENT,
        "verified_by": "Test Verifier",
        "deprecated_at": "",
    }
    row.update(overrides)
    return row


def write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(FIELDS))
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_json(path: Path, rows: list[Any]) -> Path:
    path.write_text(json.dumps(rows), encoding="utf-8")
    return path


def write_registry_sources(root: Path, registry: str, *, extra: str = "", repo: Path | None = None) -> Path:
    """A sources file with a registry section (and one git source: the repo given, or an empty one)."""
    if repo is None:
        repo = root / "empty-repo"
        repo.mkdir(exist_ok=True)
    path = root / "sources.yaml"
    path.write_text(
        f"version: 1\nregistry:\n{registry}\n{extra}sources:\n  - {{name: docs, repo: {repo}, collection: docs}}\n",
        encoding="utf-8",
    )
    return path
