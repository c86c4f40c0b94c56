"""The answer gate (orchestration/assets/answer_gate.py) in real Dagster runs over the bundled example in a git
repository of its own: the first version publishes and records its score, a harmless commit publishes, a commit
that deletes the file answering some of the suite is refused (CURRENT stays), and the refusal names the cases;
the registry's publish step is gated the same way (a registry that loses the row answering a case is refused)."""

from pathlib import Path

import pytest
from dagster import DagsterInstance
from support.examples import copy_bundled_example

from livemem.version.store import IndexHome
from orchestration.definitions import build_definitions

pytestmark = pytest.mark.usefixtures("embedder")  # the model loads once per session

# Cases a resident would ask; the first two are answered by the Fayette guide only.
SUITE = """\
version: 1
name: gate
cases:
  - id: mission-pantry
    category: town_county
    question: Where is the Mount Hope Mission Pantry and when is it open?
    expect: {must_cite: [fayette-county.md], answer_contains: [Mount Hope]}
  - id: lieap-documents
    category: county
    question: What documents do I bring for LIEAP in Fayette County?
    expect: {must_cite: [fayette-county.md]}
  - id: sealed-decisions
    category: governance
    question: What does the constitution say about sealed decisions?
    expect: {must_cite: [CONSTITUTION.md]}
  - id: beckley-heating
    category: need
    question: help paying the heating bill in Beckley
    expect: {first_program: ral-lieap-beckley}
"""


def checks_of(result) -> dict:
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def test_a_version_that_answers_worse_is_refused_and_a_harmless_one_publishes(tmp_path: Path) -> None:
    repo, sources = copy_bundled_example(tmp_path)
    example = sources.read_text().split("\neval:")[0]  # the bundled example names its suite with the gate off
    sources.write_text(example + "\neval: {suite: eval/gate-suite.yaml, gate: true}\n", encoding="utf-8")
    (sources.parent / "eval" / "gate-suite.yaml").write_text(SUITE, encoding="utf-8")
    home = IndexHome(tmp_path / "rag_index")
    defs = build_definitions(sources, home.root)
    instance = DagsterInstance.ephemeral()

    def build():
        return defs.resolve_job_def("build_index").execute_in_process(instance=instance, raise_on_error=False)

    first = build()
    assert first.success
    gate = checks_of(first)["answers_not_worse"]
    assert gate.passed and "nothing published yet: recorded as the first score" in gate.description
    assert (gate.metadata["staged_passed"].value, gate.metadata["cases"].value) == (3, 4)  # no registry yet
    assert "`beckley-heating` (need): first_program: the answer cites no program" in gate.metadata["failing"].value
    published = home.current()

    repo.commit({"examples/corpus/governance/CHARTER.md": (repo.path / "examples/corpus/governance/CHARTER.md")
                 .read_text() + "\nThe charter is read aloud at every first meeting of the year.\n"})  # fmt: skip
    harmless = build()
    assert harmless.success
    gate = checks_of(harmless)["answers_not_worse"]
    assert gate.passed and gate.metadata["published_passed"].value == gate.metadata["staged_passed"].value == 3
    assert home.current() != published
    published = home.current()

    repo.commit(delete=["examples/corpus/benefits/fayette-county.md"], message="drop the Fayette guide")
    breaking = build()
    assert not breaking.success
    gate = checks_of(breaking)["answers_not_worse"]
    assert not gate.passed
    assert (gate.metadata["staged_passed"].value, gate.metadata["published_passed"].value) == (1, 3)
    assert gate.metadata["regressed_count"].value == 2
    regressed = gate.metadata["regressed"].value
    assert "`mission-pantry` (town_county): must_cite fayette-county.md: not cited" in regressed
    assert "`lieap-documents` (county)" in regressed and "sealed-decisions" not in regressed
    assert "| town_county | 0/1 | 1/1 |" in gate.metadata["categories"].value
    assert "nothing" not in gate.description and "2 regressed" in gate.description
    assert home.current() == published  # the refused version never became CURRENT
    failure = next(e for e in breaking.all_events if e.event_type_value == "STEP_FAILURE")
    assert "blocking asset check failed" in failure.event_specific_data.error.message
    assert "chunks: answers_not_worse" in failure.event_specific_data.error.message

    def verify_registry():
        return defs.resolve_job_def("verify_registry").execute_in_process(instance=instance, raise_on_error=False)

    registry = verify_registry()  # the registry answers the Beckley question: one more case passes
    assert registry.success
    gate = checks_of(registry)["answers_not_worse"]
    assert gate.passed and (gate.metadata["staged_passed"].value, gate.metadata["published_passed"].value) == (4, 3)
    assert "`beckley-heating`" in gate.metadata["improved"].value
    published = home.current()
    csv = sources.parent / "registry" / "local_resources.csv"
    csv.write_text("".join(line for line in csv.read_text().splitlines(keepends=True)
                           if not line.startswith("ral-lieap-beckley,")), encoding="utf-8")  # fmt: skip
    lost = verify_registry()
    assert not lost.success and home.current() == published
    gate = checks_of(lost)["answers_not_worse"]
    assert not gate.passed and "`beckley-heating` (need): first_program" in gate.metadata["regressed"].value
