"""A 211's HSDS 1.x package published as the registry of a Florida deployment (``registry: {kind: hsds}``, ``home:
{states: [FL]}``) and residents' questions about its area answered from it through POST /chat (issue 46; the
≥ 4,000-service version of this is ``bench/registry_answers.py``). The package is the committed fixture
``tests/fixtures/hsds_v1_211``: its services 21-23 are Florida DCF ACCESS offices named after their sites (HIALEAH,
CENTRAL, NORTH MIAMI; Miami-Dade County), service 4 a homeless shelter in Fort Lauderdale (Broward, ZIP 33305)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from support.context import INTERNAL_KEY, make_app

from bench.registry_answers import build, write_deployment
from livemem.answer.evaluation import Case, HttpAsker, check_case
from livemem.version.store import IndexHome

PROJECT = Path(__file__).resolve().parents[2]
FIXTURE = PROJECT / "tests" / "fixtures" / "hsds_v1_211"

CASES = [
    Case("dcf-hialeah", "organization", "where do I apply for food stamps in Hialeah?",
         {"county": "Miami-Dade", "home_scope": True, "response_class": "answer", "first_program": "21",
          "answer_contains": ["Florida DCF ACCESS", "HIALEAH"], "answer_not_contains": ["West Virginia"]}),
    Case("dade-snap", "county", "food stamps in Dade",
         {"county": "Miami-Dade", "first_program": "snap", "must_cite": ["21", "22", "23"], "must_not_cite": ["11"]}),
    Case("zip-shelter", "zip", "homeless shelter near 33305",
         {"county": "Broward", "state": "FL", "first_program": "4"}),
    Case("atlanta", "out_of_state", "food bank in Atlanta GA",
         {"state": "GA", "response_class": "redirect", "answer_contains": ["outside Florida", "Florida 211"]}),
]  # fmt: skip


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> IndexHome:
    root = tmp_path_factory.mktemp("hsds-answers")
    package = shutil.copytree(FIXTURE, root / "package")
    sources = write_deployment(root, package, undated="unverified_shown")
    build(sources, root / "rag_index")
    return IndexHome(root / "rag_index")


def test_the_published_hsds_registry_answers_residents_of_its_area(home, embedder) -> None:
    assert home.manifest(home.current())["home"]["states"] == ["FL"]
    assert home.manifest(home.current())["registry"]["kind"] == "hsds"
    with TestClient(make_app(home, embedder, cache_size=0)) as client:
        ask = HttpAsker(client, {"internal": INTERNAL_KEY})
        failures = {case.id: check_case(case, *ask(case)) for case in CASES}
    assert failures == {case.id: [] for case in CASES}
