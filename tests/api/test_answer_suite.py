"""An answer suite end to end on the bundled example (built once per session): asked over HTTP through POST /chat
and in process (what `livemem eval` and the publish gate use), the two agree case by case; `livemem eval` prints
accuracy per category, lists failures with why, and exits 1 when a case fails."""

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from support.context import INTERNAL_KEY, example_index, make_app
from typer.testing import CliRunner

from livemem.answer.evaluation import HttpAsker, SnapshotAsker, load_suite, retriever_for, run_suite
from livemem.engine.snapshot import load_snapshot
from livemem.settings import ContextSettings, ServingSettings
from orchestration.cli import app as cli

SUITE = """\
version: 1
name: small
cases:
  - id: seed-grandmother
    category: seed
    question: Where can a grandmother in ZIP 25840 get utility assistance?
    expect: {county: Fayette, wv_scope: true, response_class: answer, must_cite: [fay-lieap-cap],
             resource_types: [utility_assistance], must_not_cite: [ral-*]}
  - id: playbook-public
    category: role
    question: escalation contacts in the caseworker playbook for a heat shutoff
    expect: {must_not_cite: [collection:internal_playbooks], answer_not_contains: [555-0181]}
  - id: playbook-internal
    category: role
    role: internal
    question: escalation contacts in the caseworker playbook for a heat shutoff
    expect: {must_cite: [caseworker-playbook.md]}
  - id: persona-refused
    category: role
    persona: caseworker
    question: SNAP intake checklist
    expect: {status: 403}
  - id: columbus
    category: out_of_state
    question: SNAP office in Columbus, Ohio
    expect: {response_class: [redirect, negotiate], wv_scope: false, must_not_cite: ["kind:registry"]}
  - id: wrong-on-purpose
    category: seed
    question: help paying the heating bill in Beckley
    expect: {county: Fayette, first_program: fay-lieap-cap}
"""


@pytest.fixture(scope="module")
def home(tmp_path_factory, embedder):
    return example_index(tmp_path_factory)


@pytest.fixture(scope="module")
def suite_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("suite") / "suite.yaml"
    path.write_text(SUITE, encoding="utf-8")
    return path


def test_http_and_in_process_answers_agree_case_by_case(home, embedder, suite_file) -> None:
    suite = load_suite(suite_file)
    with TestClient(make_app(home, embedder, cache_size=0)) as client:
        http = run_suite(suite, HttpAsker(client, {"internal": INTERNAL_KEY}), home.current())
    snap = load_snapshot(home, home.current())
    serving = ServingSettings(api_keys={INTERNAL_KEY: "internal"})
    try:
        ask = SnapshotAsker(snap, retriever_for(serving, embedder), ContextSettings(warm_up=False), serving)
        local = run_suite(suite, ask, home.current())
        again = run_suite(suite, ask, home.current())
    finally:
        snap.close()
    assert [(c.id, c.passed, c.failures) for c in http.cases] == [(c.id, c.passed, c.failures) for c in local.cases]
    assert [c.answer for c in local.cases] == [c.answer for c in again.cases]  # deterministic
    assert [c.id for c in http.failed] == ["wrong-on-purpose"]
    wrong = http.failed[0]
    assert "county: resolved ['Raleigh'], expected ['Fayette']" in wrong.failures
    assert (
        "first_program: the first program cited is ral-lieap-beckley (utility_assistance), expected fay-lieap-cap"
        in (wrong.failures)
    )
    assert http.by_category() == {
        "out_of_state": {"passed": 1, "total": 1, "accuracy": 1.0},
        "role": {"passed": 3, "total": 3, "accuracy": 1.0},
        "seed": {"passed": 1, "total": 2, "accuracy": 0.5},
    }


def test_livemem_eval_prints_accuracy_lists_failures_and_exits_1(home, suite_file, monkeypatch) -> None:
    monkeypatch.setenv("RAG_API_KEYS", json.dumps({INTERNAL_KEY: "internal"}))
    runner = CliRunner()
    base = ["--index-dir", str(home.root)]
    shown = runner.invoke(cli, [*base, "eval", str(suite_file), "--show-failures"])
    assert shown.exit_code == 1, shown.output
    assert "│ seed" in shown.output and "50.0%" in shown.output and "83.3%" in shown.output
    assert "wrong-on-purpose" in shown.output and "expected fay-lieap-cap" in shown.output
    # it says which index it asks (issue 49: silently RAG_INDEX_DIR's), and when the sources file is another's
    assert f"asking index version {home.current()} of {home.root}" in shown.output and "note:" not in shown.output
    other = home.root.parent / "other-sources.yaml"
    other.write_text("sources:\n  - {name: elsewhere, repo: ., collection: elsewhere}\n", encoding="utf-8")
    noted = runner.invoke(cli, ["--sources", str(other), *base, "eval", str(suite_file), "--category", "role"])
    assert "names other sources (elsewhere) than this index holds" in noted.output, noted.output
    roles = runner.invoke(cli, [*base, "eval", str(suite_file), "--category", "role", "--json"])
    assert roles.exit_code == 0, roles.output
    report = json.loads(roles.output)
    assert (report["passed"], report["total"], report["version"]) == (3, 3, home.current())
    assert runner.invoke(cli, [*base, "eval", str(suite_file), "--min-accuracy", "0.8"]).exit_code == 0
    unknown = runner.invoke(cli, [*base, "eval", str(suite_file), "--category", "typo"])
    assert unknown.exit_code == 1 and "no case of category typo" in unknown.output
