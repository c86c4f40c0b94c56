"""Answer suites (livemem.answer.evaluation): the loader's errors name file, line and column; each expectation is
checked against a /chat-shaped answer and says what it saw; results add up per category; the gate's comparison."""

from pathlib import Path

import pytest

from livemem.answer.evaluation import (
    Case,
    CaseResult,
    EvalConfig,
    GateOutcome,
    SnapshotAsker,
    SuiteResult,
    check_case,
    compare,
    gate,
    load_suite,
)
from livemem.errors import ConfigError
from livemem.settings import ServingSettings
from livemem.sources.config import load_sources

PROJECT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_bundled_suite_loads_with_300_questions_and_unique_ids() -> None:
    suite = load_suite(PROJECT / "examples" / "eval" / "suite.yaml")
    assert len(suite.cases) >= 300  # issue 48: every kind of defect it found is a category
    assert len({c.id for c in suite.cases}) == len(suite.cases)
    assert {"out_of_state", "town_county", "zip", "typo", "need", "yes_no", "seed", "role"} <= set(suite.categories)
    issue_48 = {"plain_words", "spanish", "answer_order", "eligibility", "closed_programs", "hours", "dates"}
    assert issue_48 <= set(suite.categories)
    mount_hope = next(c for c in suite.cases if c.id == "yesno-mount-hope-pantry-raleigh")
    assert mount_hope.expect["answer_contains"] == ["No", "Fayette"] and mount_hope.line > 1


def test_every_schema_mistake_is_reported_at_its_line_and_column(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "version: 1\n"
        "cases:\n"
        "  - id: ok\n"
        "    category: zip\n"
        "    question: food pantry 25840\n"
        "  - id: bad\n"
        "    category: Zip Codes\n"
        "    question: SNAP\n"
        "    expect: {response_class: maybe, wv_scope: yes please}\n"
        "  - id: no-question\n"
        "    category: zip\n",
    )
    with pytest.raises(ConfigError) as err:
        load_suite(path)
    text = str(err.value)
    assert f"{path}:7:15: cases[1].category: 'Zip Codes' does not match" in text
    assert f"{path}:9:30: cases[1].expect.response_class: 'maybe' is not one of ['answer', 'negotiate'" in text
    assert f"{path}:9:47: cases[1].expect.wv_scope: 'yes please' is not of type 'boolean'" in text
    assert f"{path}:10:5: cases[2]: 'question' is a required property" in text


def test_duplicate_ids_and_unknown_expectations_are_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "version: 1\ncases:\n  - {id: a, category: zip, question: one}\n  - {id: a, category: zip, question: two}\n",
    )
    with pytest.raises(ConfigError, match=r"suite.yaml:4: cases\[1\].id: 'a' is also the id of the case at line 3"):
        load_suite(path)
    typo = write(tmp_path, "version: 1\ncases:\n  - {id: a, category: zip, question: q, expect: {must_cyte: [x]}}\n")
    with pytest.raises(
        ConfigError,
        match=r"suite.yaml:3:49: cases\[0\].expect: Additional properties are not allowed \(.must_cyte. was unexpected\)",
    ):
        load_suite(typo)


def test_yaml_syntax_errors_name_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "version: 1\ncases:\n  - {id: a, category: zip, history: [What about Oak Hill?]}\n")
    with pytest.raises(ConfigError, match=r"suite.yaml:3:\d+: not valid YAML"):
        load_suite(path)


def test_the_sources_file_names_its_suite_and_gate(tmp_path: Path) -> None:
    sources = tmp_path / "sources.yaml"
    sources.write_text(
        "sources:\n  - {name: docs, repo: ., collection: docs}\neval: {suite: eval/suite.yaml, min_accuracy: 0.9}\n",
        encoding="utf-8",
    )
    config = EvalConfig.from_sources(load_sources(sources))
    assert config == EvalConfig((tmp_path / "eval" / "suite.yaml").resolve(), True, 0.9)
    sources.write_text(
        "sources:\n  - {name: docs, repo: ., collection: docs}\neval: {suite: s.yaml, gate: sometimes}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"sources.yaml:3:29: eval.gate: 'sometimes' is not of type 'boolean'"):
        EvalConfig.from_sources(load_sources(sources))


# An answer shaped like POST /chat's (citations, route, evidence), as the Mount Hope question got it before issue 32.
REGISTRY = [
    {"local_resource_id": "ral-pantry-sophia", "resource_type": "food_pantry"},
    {"local_resource_id": "fay-dhhr-snap", "resource_type": "snap"},
]
BODY = {
    "answer": "From the West Virginia evidence:\n- Sophia Area Food Pantry (Raleigh County) [1]\n- SNAP office [2]\n"
    "- Raleigh County Food Bank Pantry [3]\n- The Oak Hill benefits hub [4]",
    "citations": [
        {"n": 1, "kind": "registry", "id": "ral-pantry-sophia"},
        {"n": 2, "kind": "registry", "id": "fay-dhhr-snap"},
        {"n": 3, "kind": "entity", "id": "685db0b5", "provenance": {"pk": "wvb-006"}},
        {
            "n": 4,
            "kind": "chunk",
            "id": "c1",
            "collection": "wv_benefits",
            "provenance": {"path": "examples/corpus/benefits/fayette-county.md"},
        },
    ],
    "route": {
        "response_class": "answer",
        "reason": "evidence found",
        "filters": {"county": ["Raleigh"], "resource_type": ["food_pantry"]},
        "wv_scoped": True,
        "wv_reasons": ["WV county Raleigh"],
    },
    "evidence": {"registry": REGISTRY},
}


def failures(expect: dict, body: dict = BODY, status: int = 200) -> list[str]:
    return check_case(Case("c", "town_county", "Is there a food pantry in Mount Hope?", expect), status, body)


def test_each_expectation_says_what_the_answer_showed() -> None:
    assert failures({"county": "Fayette"}) == ["county: resolved ['Raleigh'], expected ['Fayette']"]
    assert failures({"county": "Raleigh County"}) == []
    assert failures({"county": []}) == ["county: resolved ['Raleigh'], expected none"]
    assert failures({"county_includes": ["Fayette"]}) == [
        "county_includes: Fayette not resolved (resolved: ['Raleigh'])"
    ]
    assert failures({"state": "WV"}) == ["state: route has no state (expected WV)"]
    assert failures({"state": "WV"}, {**BODY, "route": {**BODY["route"], "state": "NC"}}) == [
        "state: resolved ['NC'], expected WV"
    ]
    assert failures({"wv_scope": False}) == ["wv_scope: True (WV county Raleigh), expected False"]
    assert failures({"response_class": ["redirect", "negotiate"]}) == [
        "response_class: answer (evidence found), expected redirect or negotiate"
    ]
    assert failures({"resource_types": ["food_pantry"]}) == []
    assert failures({"resource_types": ["healthcare", "food_pantry"]}) == [
        "resource_types: healthcare not detected (detected: ['food_pantry'])"
    ]


def test_citations_are_named_by_registry_id_place_key_path_collection_kind_or_glob() -> None:
    cited = "cited: registry ral-pantry-sophia, registry fay-dhhr-snap, place wvb-006, passage examples/corpus/benefits/fayette-county.md"
    assert failures({"must_cite": ["wvb-005"]}) == [f"must_cite wvb-005: not cited ({cited})"]
    assert failures({"must_cite": ["wvb-006", "fay-dhhr-snap", "fayette-county.md", "collection:wv_benefits"]}) == []
    assert failures({"must_cite": ["benefits/fayette-county.md", "685db0b5"]}) == []
    assert failures({"must_cite": ["county.md"]}) != []  # a path matches by whole parts only
    assert failures({"must_not_cite": ["ral-*"]}) == ["must_not_cite ral-*: cited as registry ral-pantry-sophia"]
    assert failures({"must_not_cite": ["kind:entity"]}) == ["must_not_cite kind:entity: cited as place wvb-006"]
    assert failures({"must_not_cite": ["collection:internal_playbooks", "wvb-005"]}) == []
    fact = {"n": 5, "kind": "fact", "id": "af250ef0", "predicate": "located_in", "provenance": {"source_pk": "wvb-008"}}
    with_fact = {**BODY, "citations": [fact]}
    assert failures({"must_cite": ["wvb-008", "af250ef0"]}, with_fact) == []  # a fact about a place cites the place
    assert failures({"must_not_cite": ["kind:fact"]}, with_fact) == [
        "must_not_cite kind:fact: cited as fact wvb-008 located_in"
    ]


def test_answer_words_are_whole_words_any_case() -> None:
    assert failures({"answer_contains": ["No"]}) == ["answer_contains 'No': not in the answer"]  # "Food", "not"
    assert failures({"answer_contains": ["sophia area", "Oak  Hill"]}) == []
    assert failures({"answer_not_contains": ["raleigh county"]}) == [
        "answer_not_contains 'raleigh county': in the answer"
    ]
    assert failures({"answer_not_contains": ["+1304", "**"]}) == []
    assert failures({"answer_not_contains": ["**"]}, {**BODY, "answer": "**Oak Hill benefits hub** [4]"}) == [
        "answer_not_contains '**': in the answer"
    ]


def test_the_answer_starts_with_the_direct_answer_after_its_heading() -> None:
    no_first = (
        "From the West Virginia evidence in Living Memory:\nNo verified WIC program is listed for Lewisburg.\n- X [1]"
    )
    assert failures({"answer_starts_with": "No"}, {**BODY, "answer": no_first}) == []
    assert failures({"answer_starts_with": "no verified WIC"}, {**BODY, "answer": no_first}) == []
    yes_item = "From Living Memory:\n- Yes: Sophia Area Food Pantry (Raleigh County) [1]"
    assert failures({"answer_starts_with": "Yes"}, {**BODY, "answer": yes_item}) == []  # the list mark is ignored
    assert failures({"answer_starts_with": "No"}, {**BODY, "answer": "- Not open on Saturday [1]"}) == [
        "answer_starts_with 'No': the answer begins 'Not open on Saturday [1]'"
    ]  # whole words: "Not" is no "No"
    later = "From Living Memory:\n- Oak Hill Church Pantry [1]\nNo verified food pantry program is listed."
    assert failures({"answer_starts_with": "No"}, {**BODY, "answer": later}) == [
        "answer_starts_with 'No': the answer begins 'Oak Hill Church Pantry [1]'"
    ]  # the none-here line last is not the direct answer first


def test_the_first_program_is_the_first_registry_row_the_answer_cites() -> None:
    assert failures({"first_program": "ral-pantry-sophia"}) == []
    assert failures({"first_program": "food_pantry"}) == []
    assert failures({"first_program": "snap"}) == [
        "first_program: the first program cited is ral-pantry-sophia (food_pantry), expected snap"
    ]
    no_rows = {**BODY, "citations": BODY["citations"][2:]}
    assert failures({"first_program": "snap"}, no_rows) == [
        "first_program: the answer cites no program (expected snap)"
    ]


def test_status_is_checked_first_and_a_refusal_can_be_the_expected_answer() -> None:
    refused = {"detail": "persona 'caseworker' needs access internal"}
    assert failures({"status": 403, "county": "Fayette"}, refused, 403) == []
    assert failures({"county": "Fayette"}, refused, 403) == [
        "status: HTTP 403 (persona 'caseworker' needs access internal), expected 200"
    ]
    assert failures({"status": 403}) == ["status: HTTP 200 (), expected 403"]


def result(version: str, passed: dict[str, bool]) -> SuiteResult:
    cases = tuple(
        CaseResult(i, i.split("-")[0], "q", ok, () if ok else ("x",), "", "answer", 1.0) for i, ok in passed.items()
    )
    return SuiteResult("s", version, cases)


def test_accuracy_per_category_and_the_gate_comparison() -> None:
    published = result("v1", {"zip-a": True, "zip-b": True, "town-a": False, "town-b": True})
    assert published.by_category() == {
        "town": {"passed": 1, "total": 2, "accuracy": 0.5},
        "zip": {"passed": 2, "total": 2, "accuracy": 1.0},
    }
    assert (published.passed, published.total, published.accuracy) == (3, 4, 0.75)
    worse = compare(result("v2", {"zip-a": False, "zip-b": True, "town-a": False, "town-b": True}), published)
    assert worse.worse and worse.regressed == ["zip-a"] and worse.improved == []
    assert "1 regressed" in worse.summary()
    # a case that passed before fails now: refused even though another one is fixed (the count is the same)
    traded = compare(result("v2", {"zip-a": False, "zip-b": True, "town-a": True, "town-b": True}), published)
    assert traded.worse and traded.regressed == ["zip-a"] and traded.improved == ["town-a"]
    assert traded.staged.passed == published.passed and "1 regressed" in traded.summary()
    better = compare(result("v2", {"zip-a": True, "zip-b": True, "town-a": True, "town-b": True}), published)
    assert not better.worse and better.improved == ["town-a"]
    first = compare(result("v1", {"zip-a": True, "zip-b": False}), None)
    assert not first.worse and "nothing published yet" in first.summary()
    assert compare(result("v1", {"zip-a": True, "zip-b": False}), None, min_accuracy=0.9).worse


def test_a_case_asks_as_its_role_or_the_role_of_its_key() -> None:
    serving = ServingSettings(api_keys={"k-internal": "internal"})
    ask = SnapshotAsker(None, None, None, serving)  # role_of reads the settings only
    assert ask.role_of(Case("a", "role", "q")) == ("public", "")
    assert ask.role_of(Case("a", "role", "q", role="internal")) == ("internal", "")
    assert ask.role_of(Case("a", "role", "q", key="k-internal")) == ("internal", "")
    assert ask.role_of(Case("a", "role", "q", key="nope-1234")) == (None, "unknown API key ...1234")
    assert ask.role_of(Case("a", "role", "q", role="admin")) == (None, "unknown role 'admin' (RAG_ROLES)")
    assert ask(Case("a", "role", "q", role="admin")) == (401, {"detail": "unknown role 'admin' (RAG_ROLES)"})
    assert Case("a", "seed", "Oak Hill WV county benefits", county="Fayette", persona="community").body() == {
        "message": "Oak Hill WV county benefits",
        "county": "Fayette",
        "role": "community",
    }


def test_the_gate_passes_only_what_it_can_judge_and_fails_an_unreadable_suite(tmp_path: Path) -> None:
    sources = tmp_path / "sources.yaml"

    def outcome(eval_section: str, staged: str | None = "20261126T000000000000Z"):
        sources.write_text(f"sources:\n  - {{name: docs, repo: ., collection: docs}}\n{eval_section}", encoding="utf-8")
        return gate(load_sources(sources), None, staged, None)  # these outcomes open no version and no model

    assert outcome("") == GateOutcome(True, "no answer suite in the sources file (eval.suite): nothing to compare")
    assert outcome("eval: {suite: s.yaml, gate: false}\n").summary.startswith("the answer gate is off")
    assert outcome("eval: {suite: s.yaml}\n", staged=None).passed
    write(tmp_path, "version: 1\ncases:\n  - {id: a, category: Zip, question: q}\n")
    refused = outcome("eval: {suite: suite.yaml}\n")
    assert not refused.passed
    assert (
        f"the answer suite cannot be read: invalid answer suite:\n  {tmp_path / 'suite.yaml'}:3:23: cases[0].category"
        in refused.summary
    )
    missing = outcome("eval: {suite: nowhere.yaml}\n")
    assert not missing.passed and "nowhere.yaml does not exist" in missing.summary
