"""Names with one owner (issue 36): a helper or constant written again in a second module drifts from the first
(``iso`` was defined four times, two of them formatting differently; ``LAYOUT_VERSION`` twice, kept equal by a
comment). Each is defined once and imported everywhere else."""

from __future__ import annotations

import ast
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from livemem.dates import iso, utc_now

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
NOT_YET: set[str] = set()  # every module uses livemem.dates (personal memory's second-resolution stamp: event_iso)


def defined_in(name: str) -> list[str]:
    """The modules under livemem/ that define ``name`` at their top level (a function, class or assignment)."""
    found = []
    for path in sorted((ROOT / "livemem").rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name:
                found.append(path.relative_to(ROOT).as_posix())
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                    found.append(path.relative_to(ROOT).as_posix())
    return sorted(set(found))


@pytest.mark.parametrize(
    ("name", "owner"),
    [
        ("utc_now", "livemem/dates.py"),
        ("iso", "livemem/dates.py"),
        ("LAYOUT_VERSION", "livemem/version/schema.py"),  # what the manifest records and the reader serves
    ],
)
def test_each_name_is_defined_once(name, owner) -> None:
    assert [m for m in defined_in(name) if m not in NOT_YET] == [owner]


def test_one_timestamp_format_for_every_step() -> None:
    """What manifests, the publish log, registry history and answers' routes write: UTC with a ``Z``."""
    now = utc_now()
    assert now.tzinfo is not None and now.utcoffset() == timedelta(0)
    assert iso(datetime(2026, 9, 14, 8, 30, tzinfo=UTC)) == "2026-09-14T08:30:00Z"
    assert iso(datetime(2026, 9, 14, 4, 30, tzinfo=timezone(timedelta(hours=-4)))) == "2026-09-14T08:30:00Z"
    assert iso(datetime(2026, 9, 14, 8, 30, 0, 120)) == "2026-09-14T08:30:00.000120"  # naive: as it is
    assert iso(None) is None
