"""Dates that mean what people mean: the date a document carries (front matter, first heading, file name) is kept
on its chunks, and a question's date expression filters on it, else on the commit time, through /context."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from support.context import make_app
from support.serving import OLD_DATE, build_and_publish, commit_files, make_workspace

from livemem.dates import document_date, question_dates
from livemem.version.store import IndexHome

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("path", "text", "expected"),
    [
        ("minutes.md", "---\ntitle: Minutes\ndate: 2025-04-03\n---\n# Minutes of May 2024\n", ("2025-04-03", "front_matter", "day")),
        ("minutes.md", '---\ndate: "14 September 2026"\n---\ntext\n', ("2026-09-14", "front_matter", "day")),
        ("decisions/2026-09-council-minutes.md", "# Community Council Minutes — September 2026\n\nQuorum.\n",
         ("2026-09-01", "heading", "month")),
        ("2026-09-19-minutes.md", "# Minutes — September 2026\n", ("2026-09-19", "file_name", "day")),
        ("notes/report_20250102.txt", "no heading here", ("2025-01-02", "file_name", "day")),
        ("annual-report-2025.md", "# Annual report\n", ("2025-01-01", "file_name", "year")),
        ("a.md", "```\n# 2020 is a comment in a fence\n```\n\n# Charter\n", None),
        ("rfc2046.txt", "Chapter 3", None),
        ("CHARTER.md", "# Charter\n\nAdopted on 1 March 2026.\n", None),
        ("2026-13-45-notes.md", "# Notes\n", ("2026-01-01", "file_name", "year")),  # no month 13: the year
    ],
)  # fmt: skip
def test_the_date_a_document_carries(path: str, text: str, expected: tuple[str, str, str] | None) -> None:
    found = document_date(path, text)
    if expected is None:
        assert found is None
    else:
        assert (found["document_date"], found["date_source"], found["date_precision"]) == expected


@pytest.mark.parametrize(
    ("message", "after", "before"),
    [
        ("What did the council decide in September 2026?", "2026-09-01", "2026-10-01"),
        ("What did the council decide in September?", "2026-09-01", "2026-10-01"),
        ("what was decided in December", "2025-12-01", "2026-01-01"),  # the latest December that has begun
        ("what changed last month", "2026-10-01", "2026-11-01"),  # the calendar month, not 30 days back
        ("council decisions 2025", "2025-01-01", "2026-01-01"),
        ("minutes of 19 September 2026", "2026-09-19", "2026-09-20"),
        ("decisions since March 2026", "2026-03-01", None),
        ("decisions after March 2026", "2026-04-01", None),
        ("rules before 2026", None, "2026-01-01"),
        ("anything from the past 30 days", "2026-10-23", None),
        ("what did they decide yesterday", "2026-11-21", "2026-11-22"),
        ("the office at 2000 Main Street", None, None),
        ("I owe $2025 on the heating bill", None, None),
        ("SNAP office for ZIP 25801", None, None),
        # "from" alone names where something comes from: that month, not "since"
        ("council minutes from March 2026", "2026-03-01", "2026-04-01"),
        ("council minutes from march", "2026-03-01", "2026-04-01"),
        ("decisions from March 2026 onwards", "2026-03-01", None),
        ("decisions from March to June 2026", "2026-03-01", "2026-07-01"),
        ("what was decided between March and May", "2026-03-01", "2026-06-01"),
        ("what did the council decide last fall", "2025-09-01", "2025-12-01"),
        ("what did the council decide this fall", "2026-09-01", "2026-12-01"),
        ("heating rules from winter 2025", "2025-12-01", "2026-03-01"),
        ("where can I get a winter coat this winter", None, None),  # not begun: nothing is dated in it yet
        ("help moving from Marchand to Beckley", None, None),
        ("help from may be too late", None, None),
    ],
)
def test_the_range_a_question_names(message: str, after: str | None, before: str | None) -> None:
    found, notes = question_dates(message, NOW)
    assert (found.after.date().isoformat() if found.after else None) == after
    assert (found.before.date().isoformat() if found.before else None) == before
    assert all(n["from"] and n["from"].lower() in message.lower() for n in notes)


MINUTES = {
    # Committed long after the meetings: the commit time says 2020 (below) or today, never the meeting's month.
    "governance/decisions/2026-09-council-minutes.md": "# Community Council Minutes — September 2026\n\n"
    "Decision 2026-09-01: the breath tone returns to normal and the heating guidance is rewritten.\n",
    "governance/decisions/2026-03-council-minutes.md": "# Community Council Minutes — March 2026\n\n"
    "Decision 2026-03-01: the council approved adding the Raleigh County guide.\n",
    "governance/decisions/retreat.md": "---\ndate: 2026-09-26\n---\n# Council retreat notes\n\n"
    "The council decided to hold the winter heating clinic in Beckley.\n",
}


@pytest.fixture(scope="module")
def client(tmp_path_factory, embedder):
    root = tmp_path_factory.mktemp("dates")
    sources = make_workspace(root)
    commit_files(root / "repo", MINUTES, "minutes, filed late", date=OLD_DATE)
    home = IndexHome(root / "rag_index")
    build_and_publish(sources, home, embedder)
    with TestClient(make_app(home, embedder)) as c:
        yield c


def names(data: dict) -> set[str]:
    return {p["provenance"]["path"].rsplit("/", 1)[-1] for p in data["unstructured"]}


def context(client: TestClient, message: str) -> dict:
    response = client.post("/context", json={"message": message, "top_k": 6})
    assert response.status_code == 200, response.text
    return response.json()


def test_a_month_in_the_question_finds_the_documents_of_that_month(client) -> None:
    data = context(client, "What did the council decide in September 2026?")
    # Committed in 2020: filtering on commit time found nothing here before.
    assert names(data) == {"2026-09-council-minutes.md", "retreat.md"}
    dates = {p["provenance"]["path"]: (p["document_date"], p["date_source"]) for p in data["unstructured"]}
    assert dates["governance/decisions/2026-09-council-minutes.md"] == ("2026-09-01", "heading")
    assert dates["governance/decisions/retreat.md"] == ("2026-09-26", "front_matter")
    route = data["route"]
    assert route["filters"]["updated_after"] == "2026-09-01T00:00:00Z"
    assert route["dates"]["before"] == "2026-10-01T00:00:00Z" and route["dates"]["from"] == "in september 2026"
    assert set(route["dates"]["passages_dated_by"]) == {"heading", "front_matter"}


def test_undated_documents_fall_back_to_their_commit_time(client) -> None:
    old = context(client, "What does the constitution say, in 2020?")
    assert "CONSTITUTION.md" in names(old)
    assert {p["date_source"] for p in old["unstructured"]} == {"commit"}
    assert all(p["document_date"].startswith("2020-01-15") for p in old["unstructured"])
    # the March minutes are dated by their heading: a question about March 2026 finds them, not September's
    march = context(client, "What did the council decide in March 2026?")
    assert names(march) == {"2026-03-council-minutes.md"}


def test_without_a_date_every_passage_still_shows_its_date(client) -> None:
    data = context(client, "What did the council decide about heating?")
    assert data["route"]["dates"] is None
    assert len(names(data)) >= 2
    assert all(
        p["document_date"] and p["date_source"] in ("heading", "front_matter", "commit") for p in data["unstructured"]
    )


def test_query_filters_on_the_document_date_before_ranking(client) -> None:
    """``/query`` takes the same range (``filters.dated_after`` / ``dated_before``): chunks out of it are excluded
    before ranking, so the September minutes are found by a question that matches other documents better."""
    body = {
        "query": "constitution council decide",
        "top_k": 10,
        "filters": {"dated_after": "2026-09-01T00:00:00Z", "dated_before": "2026-10-01T00:00:00Z"},
    }
    response = client.post("/query", json=body)
    assert response.status_code == 200, response.text
    paths = {r["provenance"]["path"].rsplit("/", 1)[-1] for r in response.json()["results"]}
    assert paths == {"2026-09-council-minutes.md", "retreat.md"}
    commit_only = client.post("/query", json={**body, "filters": {"updated_after": "2026-09-01T00:00:00Z"}})
    found = {r["provenance"]["path"].rsplit("/", 1)[-1] for r in commit_only.json()["results"]}
    assert not found & paths  # the minutes were committed in 2020: by commit time they are not in September 2026
