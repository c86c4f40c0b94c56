"""Retention by count and by age (issue 37): which versions a policy keeps, and the sources file's two forms."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from livemem.errors import ConfigError
from livemem.sources.config import Retention, load_sources
from livemem.version.history import parse_time
from livemem.version.store import kept_versions

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)  # a Thursday


def nightly(days: int, per_day: int = 1) -> dict[str, datetime]:
    """A version every night (``per_day`` a day) for ``days`` days up to NOW."""
    out = {}
    for d in range(days):
        for k in range(per_day):
            when = NOW - timedelta(days=d, hours=k)
            out[when.strftime("%Y%m%dT%H%M%S%fZ")] = when
    return out


def test_keep_last_alone_keeps_the_newest() -> None:
    versions = nightly(10)
    kept = kept_versions(Retention(keep_last=3), versions, NOW)
    assert kept == set(sorted(versions)[-3:])


def test_daily_and_weekly_keep_one_per_day_and_per_week() -> None:
    versions = nightly(400, per_day=3)  # three publishes a night for more than a year
    kept = kept_versions(Retention(keep_last=2, daily_days=30, weekly_weeks=52), versions, NOW)
    days = {versions[v].date() for v in kept}
    assert len([v for v in kept if versions[v] > NOW - timedelta(days=30)]) == 30 + 1  # one a day, + keep_last
    assert {NOW.date() - timedelta(days=d) for d in range(30)} <= days
    weeks = {versions[v].isocalendar()[:2] for v in kept}
    assert len(weeks) == 52  # this week and the 51 before
    assert len(kept) <= 2 + 30 + 52
    oldest_kept = min(versions[v] for v in kept)
    assert oldest_kept > NOW - timedelta(weeks=52)
    for day in days:  # the newest of its day is the one kept (the version current when the day ended)
        of_day = [v for v in versions if versions[v].date() == day]
        assert max(of_day, key=versions.get) in kept


def test_the_integer_form_is_keep_last(tmp_path) -> None:
    (tmp_path / "sources.yaml").write_text(
        "index:\n  retention: 7\nsources:\n  - {name: a, repo: ., collection: docs}\n", encoding="utf-8"
    )
    assert load_sources(tmp_path / "sources.yaml").retention == Retention(keep_last=7)
    (tmp_path / "sources.yaml").write_text(
        "index:\n  retention: {daily_days: 30, weekly_weeks: 52}\nsources:\n  - {name: a, repo: ., collection: docs}\n",
        encoding="utf-8",
    )
    assert load_sources(tmp_path / "sources.yaml").retention == Retention(keep_last=5, daily_days=30, weekly_weeks=52)


def test_a_misspelt_retention_key_is_refused_where_it_is(tmp_path) -> None:
    (tmp_path / "sources.yaml").write_text(
        "index:\n  retention: {keep_last: 3, dialy_days: 30}\nsources:\n  - {name: a, repo: ., collection: docs}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"sources.yaml:2:\d+: index.retention: Additional properties .*dialy_days"):
        load_sources(tmp_path / "sources.yaml")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-10-01T09:00:00Z", datetime(2026, 10, 1, 9, tzinfo=UTC)),
        ("2026-10-01T09:00:00", datetime(2026, 10, 1, 9, tzinfo=UTC)),  # no offset: UTC
        ("2026-10-01T11:00:00+02:00", datetime(2026, 10, 1, 9, tzinfo=UTC)),
        ("2026-10-01", datetime(2026, 10, 1, 23, 59, 59, 999999, tzinfo=UTC)),  # a date: the end of that day
        ("20261001", None),  # digits only: a commit prefix, not a date
        ("deadbeef", None),
    ],
)
def test_as_of_times(text: str, expected: datetime | None) -> None:
    assert parse_time(text) == expected
