"""Answers measured like retrieval is: a question suite (YAML, ``schemas/answer_suite.schema.json``), run through the
code path ``/chat`` answers with, and checked against what a resident would expect (docs/answers-eval.md).

- ``load_suite``: read and validate a suite; every mistake is reported at once with its file, line and column, as
  the sources file's are (``livemem.sources.config``), and ids must be unique.
- ``SnapshotAsker``: one case as ``POST /chat`` would answer it in process: the API role (or key) gives the access,
  the case's ``persona`` narrows it (``resolve_persona``), the conversation is carried (``carry``), then
  ``build_context`` and ``generate`` with no language model (extractive: deterministic). Nothing is cached,
  traced or audited. ``HttpAsker`` (bench/answers.py, tests) asks a real app instead, over HTTP.
- ``check_case``: the expectations of one case against the answer body (the ``/chat`` response shape), each
  failure spelled out ("county: resolved [Raleigh], expected [Fayette]").
- ``run_suite``: every case, accuracy per category and overall (``SuiteResult``); ``compare`` two results (the
  publish gate: ``gate``, run by a blocking asset check, orchestration/assets/answer_gate.py).
- The crisis suite (``load_crisis_suite``, ``run_crisis_suite``; docs/crisis.md): the crisis detector's recall on
  crisis messages and false alarms on controls, per kind and language; the gate (``eval.crisis``) refuses a version
  below the targets (``RECALL_TARGET``, ``FALSE_ALARM_TARGET``, per kind) or failing a crisis case that the published
  version passed (``crisis_records``: what each version passed when it was let through).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import yaml

from livemem import yamlio
from livemem.answer.chat import PERSONAS, Persona, PersonaError, generate, persona_collections, resolve_persona
from livemem.answer.context import build_context
from livemem.answer.conversation import carry, from_history
from livemem.answer.prompt import SECTIONS
from livemem.answer.routing import Caller, ContextRequest
from livemem.engine.snapshot import IndexUnavailable, Snapshot, load_snapshot_at
from livemem.errors import ConfigError
from livemem.query.fusion import FusionSettings
from livemem.query.retrieval import Retriever
from livemem.settings import ContextSettings, EngineConfig, ServingSettings
from livemem.sources.config import SourcesConfig, _located_errors
from livemem.version.store import IndexHome

SUITE_SCHEMA = "answer_suite"
EVAL_SCHEMA = "eval_config"


# --- the suite ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One question and what its answer must show (``expect``: the schema's expectations, all optional)."""

    id: str
    category: str
    question: str
    expect: dict[str, Any] = field(default_factory=dict)
    role: str | None = None
    key: str | None = None
    persona: str | None = None
    county: str | None = None
    zip: str | None = None
    history: tuple[str, ...] = ()
    line: int = 0  # where the case starts in its file (1-based; 0: unknown)

    def body(self) -> dict[str, Any]:
        """The ``POST /chat`` body asking this case."""
        out: dict[str, Any] = {"message": self.question}
        for name in ("county", "zip"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.persona is not None:
            out["role"] = self.persona
        if self.history:
            out["history"] = list(self.history)
        return out


@dataclass(frozen=True)
class Suite:
    path: Path
    name: str
    cases: tuple[Case, ...]

    @property
    def categories(self) -> list[str]:
        return sorted({c.category for c in self.cases})

    def only(self, categories: Iterable[str] | None = None, ids: Iterable[str] | None = None) -> Suite:
        """The cases of ``categories`` (and / or with ``ids``); None: no restriction."""
        cats, wanted = set(categories or ()), set(ids or ())
        kept = tuple(c for c in self.cases if (not cats or c.category in cats) and (not wanted or c.id in wanted))
        return replace(self, cases=kept)


def _yaml(file: Path) -> tuple[Any, yaml.Node | None]:
    if not file.is_file():
        raise ConfigError(f"answer suite {file} does not exist")
    text = file.read_text(encoding="utf-8")
    try:
        return yamlio.load_node(text)  # duplicate keys, alias bombs, over-deep or oversize: refused
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else str(file)
        raise ConfigError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from exc


def load_suite(path: str | os.PathLike[str]) -> Suite:
    """Read and validate a suite file. Raises ConfigError listing every problem with its file, line and column."""
    file = Path(path)
    data, root = _yaml(file)
    problems = _located_errors(file, root, data, SUITE_SCHEMA, [])
    if problems:
        raise ConfigError("invalid answer suite:\n  " + "\n  ".join(problems))
    nodes = _case_nodes(root)
    seen: dict[str, int] = {}
    cases = []
    for i, raw in enumerate(data["cases"]):
        line = nodes[i].start_mark.line + 1 if i < len(nodes) else 0
        if raw["id"] in seen:
            problems.append(
                f"{file}:{line}: cases[{i}].id: {raw['id']!r} is also the id of the case at line {seen[raw['id']]}"
            )
        seen.setdefault(raw["id"], line)
        cases.append(
            Case(
                id=raw["id"], category=raw["category"], question=raw["question"], expect=raw.get("expect") or {},
                role=raw.get("role"), key=raw.get("key"), persona=raw.get("persona"), county=raw.get("county"),
                zip=raw.get("zip"), history=tuple(raw.get("history") or ()), line=line,
            )
        )  # fmt: skip
    if problems:
        raise ConfigError("invalid answer suite:\n  " + "\n  ".join(problems))
    return Suite(file.resolve(), data.get("name") or file.stem, tuple(cases))


def _case_nodes(root: yaml.Node | None) -> list[yaml.Node]:
    if isinstance(root, yaml.MappingNode):
        for key, value in root.value:
            if key.value == "cases" and isinstance(value, yaml.SequenceNode):
                return list(value.value)
    return []


@dataclass(frozen=True)
class EvalConfig:
    """The sources file's ``eval`` section: the suite (resolved against the sources file) and the gate."""

    suite: Path
    gate: bool = True
    min_accuracy: float | None = None
    crisis: Path | None = None  # the crisis suite (docs/crisis.md), resolved like ``suite``

    @classmethod
    def from_sources(cls, config: SourcesConfig) -> EvalConfig | None:
        raw = config.section("eval", EVAL_SCHEMA)
        if raw is None:
            return None
        suite = Path(os.path.expanduser(raw["suite"]))
        suite = suite if suite.is_absolute() else (config.path.parent / suite).resolve()
        crisis = Path(os.path.expanduser(raw["crisis"])) if raw.get("crisis") else None
        crisis = crisis if crisis is None or crisis.is_absolute() else (config.path.parent / crisis).resolve()
        return cls(suite, raw.get("gate", True), raw.get("min_accuracy"), crisis)


# --- asking ------------------------------------------------------------------------------------------------------------
Answer = tuple[int, dict[str, Any]]  # (HTTP status, the /chat response body or {"detail": ...})
Asker = Callable[[Case], Answer]


def retriever_for(settings: ServingSettings, embedder: Any) -> Retriever:
    """The retriever a serving process builds from its settings (serving/state.py): the same fusion."""
    fusion = FusionSettings.from_serving(settings)
    return Retriever(embedder, fusion, settings.recency_half_life_days)


class SnapshotAsker:
    """Ask cases of one version in process, as ``POST /chat`` answers them with the extractive backend."""

    def __init__(
        self,
        snap: Snapshot,
        retriever: Retriever,
        settings: ContextSettings | None = None,
        serving: ServingSettings | None = None,
        personas: Mapping[str, Persona] = PERSONAS,
    ) -> None:
        self.snap = snap
        self.retriever = retriever
        self.settings = settings or ContextSettings.defaults(warm_up=False, audit=False)
        self.serving = serving or ServingSettings.defaults()
        self.personas = personas  # the deployment's (livemem.answer.chat.personas), as serving resolves them

    def role_of(self, case: Case) -> tuple[str | None, str]:
        """The API role a case asks as (None: refused), and why."""
        if case.key is not None:
            role = self.serving.api_keys.get(case.key)
            return role, "" if role else f"unknown API key ...{case.key[-4:]}"
        role = case.role or self.serving.public_role
        return (role, "") if role in self.serving.roles else (None, f"unknown role {role!r} (RAG_ROLES)")

    def __call__(self, case: Case) -> Answer:
        role, why = self.role_of(case)
        if role is None:
            return 401, {"detail": why}
        access = frozenset(self.serving.roles[role])
        carried = carry(
            from_history(list(case.history), self.snap.home), case.question, county=case.county, zip_code=case.zip,
            profile={}, persona=case.persona, source="history", home=self.snap.home,
        )  # fmt: skip
        request = ContextRequest(
            carried.message, carried.county, carried.zip, {}, None, None, place_from=carried.place_from,
            conversation=carried.notes,
        )  # fmt: skip
        try:  # as serving.deps.with_persona
            chosen = resolve_persona(carried.persona, role, access, self.serving.roles, self.personas)
        except PersonaError as exc:
            return exc.status, {"detail": str(exc)}
        collections = persona_collections(chosen, self.snap.collections_for(chosen.access))
        named = None if carried.persona is None else chosen.name
        request = replace(request, persona=named, collections=collections, framing=chosen.framing)
        result = build_context(self.snap, self.retriever, Caller(role, chosen.access), request, self.settings)
        answer = generate(result, self.snap, self.settings, None, persona_table=self.personas)
        return 200, {**answer, "route": result["route"], "evidence": {s: result[s] for s in SECTIONS}}


class HttpAsker:
    """Ask cases of a running app: ``client`` is an httpx-like client (a FastAPI TestClient, ``httpx.Client``)
    whose base URL is the app; ``keys``: role → an API key with that role (``RAG_API_KEYS``)."""

    def __init__(self, client: Any, keys: dict[str, str] | None = None, path: str = "/chat") -> None:
        self.client = client
        self.keys = keys or {}
        self.path = path

    def __call__(self, case: Case) -> Answer:
        headers = {}
        key = case.key if case.key is not None else self.keys.get(case.role) if case.role else None
        if case.role and key is None:
            return 401, {"detail": f"no API key for role {case.role!r} was given to the asker"}
        if key is not None:
            headers["X-API-Key"] = key
        response = self.client.post(self.path, json=case.body(), headers=headers)
        try:
            body = response.json()
        except ValueError:
            body = {"detail": response.text[:300]}
        return response.status_code, body if isinstance(body, dict) else {"detail": body}


# --- checking ----------------------------------------------------------------------------------------------------------
def _county_key(name: str) -> str:
    return re.sub(r"\s+county$", "", " ".join(str(name).split()).lower())


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _phrase(text: str) -> re.Pattern[str]:
    """``text`` as a case-insensitive phrase: whole words where it begins or ends with one ("No" is not "not")."""
    start = r"\b" if re.match(r"\w", text) else ""
    end = r"\b" if re.search(r"\w$", text) else ""
    return re.compile(start + r"\s+".join(re.escape(w) for w in text.split()) + end, re.IGNORECASE)


def citation_names(citation: dict[str, Any]) -> set[str]:
    """Every name a citation can be asked for by: its id and ``kind:KIND``, a place's key (its spatial source's id;
    also for a fact whose subject it is), a passage's path and collection (``collection:NAME``)."""
    names = {str(citation.get("id")), f"kind:{citation.get('kind')}"}
    provenance = citation.get("provenance") or {}
    place_key = provenance.get("pk") or provenance.get("source_pk")  # a place, or a fact about one (its subject)
    if citation.get("kind") in ("entity", "fact") and place_key:
        names.add(str(place_key))
    if citation.get("kind") == "chunk":
        if provenance.get("path"):
            names.add(str(provenance["path"]))
        if citation.get("collection"):
            names.add(f"collection:{citation['collection']}")
    return names


def cites(citation: dict[str, Any], ref: str) -> bool:
    """Whether ``citation`` is one ``ref`` names (a path matches by its last parts: ``fayette-county.md``; a glob
    pattern such as ``ral-*`` or ``kind:registry`` matches any of its names)."""
    names = citation_names(citation)
    if ref in names:
        return True
    if any(ch in ref for ch in "*?["):
        return any(fnmatchcase(name, ref) for name in names)
    path = (citation.get("provenance") or {}).get("path") if citation.get("kind") == "chunk" else None
    return bool(path) and str(path).endswith("/" + ref.lstrip("/"))


def _short(citation: dict[str, Any]) -> str:
    provenance = citation.get("provenance") or {}
    if citation.get("kind") == "entity":
        return f"place {provenance.get('pk') or citation.get('id')}"
    if citation.get("kind") == "fact":
        return f"fact {provenance.get('source_pk') or citation.get('id')} {citation.get('predicate', '')}".rstrip()
    if citation.get("kind") == "chunk":
        return f"passage {provenance.get('path') or citation.get('id')}"
    return f"{citation.get('kind')} {citation.get('id')}"


def _resolved_counties(route: dict[str, Any]) -> list[str]:
    if isinstance(route.get("counties"), list):
        return list(route["counties"])
    return list((route.get("filters") or {}).get("county") or [])


def _detected_needs(route: dict[str, Any]) -> list[str]:
    if isinstance(route.get("resource_types"), list):
        return list(route["resource_types"])
    return list((route.get("filters") or {}).get("resource_type") or [])


def first_line(answer: str) -> str:
    """The answer's first line after its heading ("From the West Virginia evidence in Living Memory:", a persona's:
    a first line ending in ':' followed by more), its list mark ("- ") taken off: where the direct answer must be."""
    lines = [line.strip() for line in answer.splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].endswith(":") and not lines[0].startswith("-"):
        lines = lines[1:]
    return re.sub(r"^[-*•]\s+", "", lines[0]) if lines else ""


def check_case(case: Case, status: int, body: dict[str, Any]) -> list[str]:
    """What of ``case.expect`` the answer (``status``, ``body``: the /chat response) does not show; [] passes."""
    expect = case.expect
    wanted_status = expect.get("status", 200)
    if status != wanted_status:
        return [
            f"status: HTTP {status} ({str(body.get('detail') or body.get('message') or '')[:200]}), expected {wanted_status}"
        ]
    if status != 200:
        return []
    failures: list[str] = []
    route = body.get("route") or {}
    answer = str(body.get("answer") or "")
    cited = list(body.get("citations") or [])
    failures.extend(_route_failures(expect, route))
    failures.extend(_citation_failures(expect, cited))
    failures.extend(_answer_failures(expect, answer, cited, body))
    if "resource_types" in expect:
        detected = _detected_needs(route)
        missing = [t for t in expect["resource_types"] if t not in detected]
        if missing:
            failures.append(f"resource_types: {', '.join(missing)} not detected (detected: {detected or 'none'})")
    return failures


def _route_failures(expect: dict[str, Any], route: dict[str, Any]) -> list[str]:
    """What of the expected state, counties, scope and response class the answer's route does not show."""
    failures: list[str] = []
    if "state" in expect:
        if "state" not in route:
            failures.append(f"state: route has no state (expected {expect['state']})")
        else:
            states = {str(s).upper() for s in _as_list(route["state"]) if s}
            if states != {expect["state"]}:
                failures.append(f"state: resolved {sorted(states) or 'none'}, expected {expect['state']}")
    if "county" in expect:
        resolved = _resolved_counties(route)
        wanted = [c for c in _as_list(expect["county"])]
        if {_county_key(c) for c in resolved} != {_county_key(c) for c in wanted}:
            failures.append(f"county: resolved {resolved or 'none'}, expected {wanted or 'none'}")
    if "county_includes" in expect:
        resolved = _resolved_counties(route)
        missing = [c for c in expect["county_includes"] if _county_key(c) not in {_county_key(r) for r in resolved}]
        if missing:
            failures.append(f"county_includes: {', '.join(missing)} not resolved (resolved: {resolved or 'none'})")
    if "wv_scope" in expect and bool(route.get("wv_scoped")) is not expect["wv_scope"]:
        why = "; ".join(route.get("wv_reasons") or []) or "no WV reason"
        failures.append(f"wv_scope: {bool(route.get('wv_scoped'))} ({why}), expected {expect['wv_scope']}")
    scoped = bool(route.get("home_scoped", route.get("wv_scoped")))
    if "home_scope" in expect and scoped is not expect["home_scope"]:
        why = "; ".join(route.get("wv_reasons") or []) or "no home reason"
        failures.append(f"home_scope: {scoped} ({why}), expected {expect['home_scope']}")
    if "response_class" in expect:
        accepted = _as_list(expect["response_class"])
        if route.get("response_class") not in accepted:
            failures.append(
                f"response_class: {route.get('response_class')} ({route.get('reason', '')}), expected "
                f"{' or '.join(accepted)}"
            )
    return failures


def _citation_failures(expect: dict[str, Any], cited: list[dict[str, Any]]) -> list[str]:
    """The ``must_cite`` references not cited and the ``must_not_cite`` ones cited."""
    failures: list[str] = []
    shown = ", ".join(_short(c) for c in cited) or "nothing"
    for ref in expect.get("must_cite", []):
        if not any(cites(c, ref) for c in cited):
            failures.append(f"must_cite {ref}: not cited (cited: {shown})")
    for ref in expect.get("must_not_cite", []):
        hits = [_short(c) for c in cited if cites(c, ref)]
        if hits:
            failures.append(f"must_not_cite {ref}: cited as {', '.join(hits)}")
    return failures


def _answer_failures(
    expect: dict[str, Any], answer: str, cited: list[dict[str, Any]], body: dict[str, Any]
) -> list[str]:
    """What of the expected words, first line and first program the answer's text does not show."""
    failures: list[str] = []
    for words in expect.get("answer_contains", []):
        if not _phrase(words).search(answer):
            failures.append(f"answer_contains {words!r}: not in the answer")
    for words in expect.get("answer_not_contains", []):
        if _phrase(words).search(answer):
            failures.append(f"answer_not_contains {words!r}: in the answer")
    if "answer_starts_with" in expect:
        first = first_line(answer)
        if not re.match(_phrase(expect["answer_starts_with"]).pattern, first, re.IGNORECASE):
            failures.append(f"answer_starts_with {expect['answer_starts_with']!r}: the answer begins {first[:120]!r}")
    if "first_program" in expect:
        failures.extend(_first_program(expect["first_program"], cited, body))
    return failures


def _first_program(wanted: str, cited: list[dict[str, Any]], body: dict[str, Any]) -> list[str]:
    programs = [c for c in cited if c.get("kind") == "registry"]
    if not programs:
        return [f"first_program: the answer cites no program (expected {wanted})"]
    first = programs[0]
    rows = {r.get("local_resource_id"): r for r in (body.get("evidence") or {}).get("registry") or []}
    kind = (rows.get(first.get("id")) or {}).get("resource_type")
    if wanted in (first.get("id"), kind):
        return []
    return [
        f"first_program: the first program cited is {first.get('id')} ({kind or 'type unknown'}), expected {wanted}"
    ]


# --- running -----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CaseResult:
    id: str
    category: str
    question: str
    passed: bool
    failures: tuple[str, ...]
    answer: str
    response_class: str | None
    elapsed_ms: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "category": self.category, "question": self.question, "passed": self.passed,
            "failures": list(self.failures), "answer": self.answer, "response_class": self.response_class,
            "elapsed_ms": self.elapsed_ms,
        }  # fmt: skip


@dataclass(frozen=True)
class SuiteResult:
    suite: str
    version: str | None
    cases: tuple[CaseResult, ...]

    @property
    def passed(self) -> int:
        return sum(c.passed for c in self.cases)

    @property
    def total(self) -> int:
        return len(self.cases)

    @property
    def accuracy(self) -> float:
        return self.passed / self.total if self.total else 1.0

    @property
    def failed(self) -> list[CaseResult]:
        return [c for c in self.cases if not c.passed]

    def by_category(self) -> dict[str, dict[str, Any]]:
        """category → passed, total, accuracy (categories in name order)."""
        out: dict[str, dict[str, Any]] = {}
        for category in sorted({c.category for c in self.cases}):
            mine = [c for c in self.cases if c.category == category]
            passed = sum(c.passed for c in mine)
            out[category] = {"passed": passed, "total": len(mine), "accuracy": round(passed / len(mine), 4)}
        return out

    def passing_ids(self) -> set[str]:
        return {c.id for c in self.cases if c.passed}

    def as_dict(self, cases: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "suite": self.suite, "version": self.version, "passed": self.passed, "total": self.total,
            "accuracy": round(self.accuracy, 4), "categories": self.by_category(),
        }  # fmt: skip
        if cases:
            out["cases"] = [c.as_dict() for c in self.cases]
        return out

    def summary(self) -> str:
        return f"{self.passed}/{self.total} cases pass ({self.accuracy:.1%})"


def run_case(case: Case, ask: Asker) -> CaseResult:
    started = time.perf_counter()
    status, body = ask(case)
    elapsed = round((time.perf_counter() - started) * 1000, 3)
    failures = check_case(case, status, body)
    route = body.get("route") or {}
    return CaseResult(
        case.id, case.category, case.question, not failures, tuple(failures), str(body.get("answer") or ""),
        route.get("response_class"), elapsed,
    )  # fmt: skip


def run_suite(suite: Suite, ask: Asker, version: str | None = None) -> SuiteResult:
    """Every case of ``suite`` asked with ``ask``, in the suite's order."""
    return SuiteResult(suite.name, version, tuple(run_case(case, ask) for case in suite.cases))


@dataclass(frozen=True)
class Comparison:
    """A staged version's result against the published one's, for the publish gate."""

    staged: SuiteResult
    published: SuiteResult | None
    min_accuracy: float | None = None

    @property
    def regressed(self) -> list[str]:
        """Cases the published version passes and the staged one fails (suite order)."""
        if self.published is None:
            return []
        before = self.published.passing_ids()
        return [c.id for c in self.staged.cases if c.id in before and not c.passed]

    @property
    def improved(self) -> list[str]:
        if self.published is None:
            return []
        before = self.published.passing_ids()
        return [c.id for c in self.staged.cases if c.passed and c.id not in before]

    @property
    def worse(self) -> bool:
        """A case the published version passes fails now (whatever others it fixes: a role or leak case broken is
        not paid for by another answered), fewer cases pass, or fewer than ``min_accuracy`` of them."""
        below = self.min_accuracy is not None and self.staged.accuracy < self.min_accuracy
        fewer = self.published is not None and self.staged.passed < self.published.passed
        return below or fewer or bool(self.regressed)

    def summary(self) -> str:
        staged = f"staged {self.staged.version}: {self.staged.summary()}"
        if self.published is None:
            text = f"{staged}; nothing published yet: recorded as the first score"
        else:
            text = f"{staged}; published {self.published.version}: {self.published.summary()}"
            if self.regressed:
                text += f"; {len(self.regressed)} regressed"
            if self.improved:
                text += f"; {len(self.improved)} improved"
        if self.min_accuracy is not None and self.staged.accuracy < self.min_accuracy:
            text += f"; below min_accuracy {self.min_accuracy:.1%}"
        return text


def compare(staged: SuiteResult, published: SuiteResult | None, min_accuracy: float | None = None) -> Comparison:
    return Comparison(staged, published, min_accuracy)


# --- the publish gate --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GateOutcome:
    """What the publish gate found: whether the staged version may be published, why, and the two results."""

    passed: bool
    summary: str
    comparison: Comparison | None = None
    notes: tuple[str, ...] = ()
    crisis: CrisisResult | None = None  # the crisis suite's result (docs/crisis.md), when the section names one
    crisis_regressed: tuple[str, ...] = ()  # crisis cases that passed for the published version and fail now


def evaluate_version(
    path: Path, version_id: str, suite: Suite, retriever: Retriever, settings: ContextSettings,
    serving: ServingSettings, personas: Mapping[str, Persona] = PERSONAS, engine: EngineConfig | None = None,
) -> SuiteResult:  # fmt: skip
    """The suite asked of the version in directory ``path`` (published or staged), loaded under ``engine`` (the
    home's ``IndexHome.engine``; None: the defaults)."""
    snap = load_snapshot_at(path, version_id, engine)
    try:
        return run_suite(suite, SnapshotAsker(snap, retriever, settings, serving, personas), version_id)
    finally:
        snap.close()


def gate(
    config: SourcesConfig,
    home: IndexHome,
    staged: str | None,
    embedder: Any,
    serving: ServingSettings | None = None,
    context: ContextSettings | None = None,
    personas: Mapping[str, Persona] = PERSONAS,
) -> GateOutcome:
    """The publish gate of the sources file's ``eval`` section: the staged version must pass every case of the
    suite the published one passes, and at least as many (and ``min_accuracy`` of them when set). Nothing published yet: it
    passes, and its score is the first. No suite named, ``gate: false`` or nothing staged: passes, saying so.
    An invalid suite or section fails, naming the problem (a gate that cannot run is not a gate that passed).
    The cases are asked as the serving app would (``serving``, ``context``, ``personas``: the entry point's, else
    the defaults; no warm-up, no audit)."""
    try:
        wanted = EvalConfig.from_sources(config)
        if wanted is None:
            return GateOutcome(True, "no answer suite in the sources file (eval.suite): nothing to compare")
        if not wanted.gate:
            return GateOutcome(True, f"the answer gate is off (eval.gate: false in {config.path.name})")
        if staged is None:
            return GateOutcome(True, "nothing staged: the current version was checked when published")
        suite = load_suite(wanted.suite)
        crisis_suite = load_crisis_suite(wanted.crisis) if wanted.crisis else None
    except ConfigError as exc:
        return GateOutcome(False, f"the answer suite cannot be read: {exc}")
    serving = serving or ServingSettings.defaults()
    settings = (context or ContextSettings.defaults()).model_copy(update={"warm_up": False, "audit": False})
    retriever = retriever_for(serving, embedder)
    staged_result = evaluate_version(
        home.locate(staged), staged, suite, retriever, settings, serving, personas, home.engine
    )
    published, notes = home.current(), []
    published_result = None
    if published is not None and published != staged:
        try:
            published_result = evaluate_version(
                home.version_dir(published), published, suite, retriever, settings, serving, personas, home.engine
            )
        except IndexUnavailable as exc:  # a damaged published version must not stop its replacement
            notes.append(f"the published version {published} could not be asked ({exc}); compared with nothing")
    comparison = compare(staged_result, published_result, wanted.min_accuracy)
    if crisis_suite is None:
        return GateOutcome(not comparison.worse, comparison.summary(), comparison, tuple(notes))
    # the crisis detector, as serving runs it (this embedder); "passed before": what the published version passed
    crisis_result = run_crisis_suite(crisis_suite, embedder)
    records = crisis_records(home)
    safe, said, regressed = crisis_gate(crisis_result, records.get(published) if published else None)
    passed = safe and not comparison.worse
    if passed:
        write_crisis_record(home, staged, crisis_result)
    outcome = GateOutcome(passed, f"{comparison.summary()}; {said}", comparison, tuple(notes), crisis_result)
    return replace(outcome, crisis_regressed=tuple(regressed))


# --- the crisis suite (docs/crisis.md) ---------------------------------------------------------------------------------
CRISIS_SCHEMA = "crisis_suite"
RECALL_TARGET = 0.99  # per kind, on the crisis messages
FALSE_ALARM_TARGET = 0.02  # per kind, on the controls that share its words


@dataclass(frozen=True)
class CrisisCase:
    """One message of a crisis suite: a crisis (``crisis: True``) of ``kind``, or a control sharing its words."""

    crisis: bool
    kind: str
    language: str
    message: str

    @property
    def id(self) -> str:
        """Its identity across runs (the gate's "passed before"): part, kind, language and the message itself."""
        return f"{'crisis' if self.crisis else 'control'}/{self.kind}/{self.language}: {self.message}"


@dataclass(frozen=True)
class CrisisSuite:
    path: Path
    name: str
    cases: tuple[CrisisCase, ...]


def load_crisis_suite(path: str | os.PathLike[str]) -> CrisisSuite:
    """Read and validate a crisis suite (``schemas/crisis_suite.schema.json``); ConfigError lists every problem."""
    file = Path(path)
    data, root = _yaml(file)
    problems = _located_errors(file, root, data, CRISIS_SCHEMA, [])
    if problems:
        raise ConfigError("invalid crisis suite:\n  " + "\n  ".join(problems))
    cases = [
        CrisisCase(part == "crisis", kind, lang, message)
        for part in ("crisis", "controls")
        for kind, langs in (data.get(part) or {}).items()
        for lang, messages in (langs or {}).items()
        for message in messages or []
    ]
    seen: set[str] = set()
    for case in cases:
        if case.id in seen:
            problems.append(f"{file}: {case.id!r} is given twice")
        seen.add(case.id)
    if problems:
        raise ConfigError("invalid crisis suite:\n  " + "\n  ".join(problems))
    return CrisisSuite(file.resolve(), data.get("name") or file.stem, tuple(cases))


@dataclass(frozen=True)
class CrisisCaseResult:
    case: CrisisCase
    found: dict[str, Any] | None  # kind, kinds, language, matched_by, score (None: no crisis found)
    elapsed_ms: float  # the detector's, given the vector

    @property
    def passed(self) -> bool:
        return (self.found is not None) is self.case.crisis

    @property
    def kind_right(self) -> bool:
        return self.found is not None and self.case.kind in self.found["kinds"]


def _rates(results: list[CrisisCaseResult]) -> dict[str, Any]:
    crisis = [r for r in results if r.case.crisis]
    controls = [r for r in results if not r.case.crisis]
    found = sum(r.found is not None for r in crisis)
    alarms = sum(r.found is not None for r in controls)
    return {
        "crisis": len(crisis), "found": found, "recall": round(found / len(crisis), 4) if crisis else None,
        "kind_right": sum(r.kind_right for r in crisis), "controls": len(controls), "false_alarms": alarms,
        "false_alarm_rate": round(alarms / len(controls), 4) if controls else None,
        "by_lexicon": sum(bool(r.found and r.found["matched_by"] == "lexicon") for r in crisis),
        "by_similarity": sum(bool(r.found and r.found["matched_by"] == "similarity") for r in crisis),
        "by_classifier": sum(bool(r.found and r.found["matched_by"] == "classifier") for r in crisis),
    }  # fmt: skip


@dataclass(frozen=True)
class CrisisResult:
    suite: str
    cases: tuple[CrisisCaseResult, ...]
    with_model: bool  # False: the lexicon alone (no embedder)

    def by_kind(self) -> dict[str, dict[str, Any]]:
        from livemem.answer.crisis import KINDS

        return {k: _rates([r for r in self.cases if r.case.kind == k]) for k in KINDS}

    def by_language(self) -> dict[str, dict[str, Any]]:
        langs = sorted({r.case.language for r in self.cases})
        return {lang: _rates([r for r in self.cases if r.case.language == lang]) for lang in langs}

    def by_kind_language(self) -> dict[str, dict[str, Any]]:
        pairs = sorted({(r.case.kind, r.case.language) for r in self.cases})
        return {f"{k}/{lang}": _rates([r for r in self.cases if (r.case.kind, r.case.language) == (k, lang)])
                for k, lang in pairs}  # fmt: skip

    def overall(self) -> dict[str, Any]:
        return _rates(list(self.cases))

    def below_targets(self) -> list[str]:
        """Each kind below a target, in words ("violence_abuse: recall 0.9778 < 0.99")."""
        out = []
        for kind, row in self.by_kind().items():
            if row["recall"] is not None and row["recall"] < RECALL_TARGET:
                out.append(f"{kind}: recall {row['recall']} < {RECALL_TARGET}")
            if row["false_alarm_rate"] is not None and row["false_alarm_rate"] > FALSE_ALARM_TARGET:
                out.append(f"{kind}: false alarms {row['false_alarm_rate']} > {FALSE_ALARM_TARGET}")
        return out

    @property
    def failed(self) -> list[CrisisCaseResult]:
        return [r for r in self.cases if not r.passed]

    def passing_ids(self) -> set[str]:
        return {r.case.id for r in self.cases if r.passed}

    def as_dict(self, cases: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "suite": self.suite, "with_model": self.with_model, "overall": self.overall(), "kinds": self.by_kind(),
            "languages": self.by_language(), "kinds_languages": self.by_kind_language(),
            "below_targets": self.below_targets(),
        }  # fmt: skip
        if cases:
            out["failed"] = [{"id": r.case.id, "found": r.found} for r in self.failed]
        return out

    def summary(self) -> str:
        row = self.overall()
        below = self.below_targets()
        return (
            f"crisis suite: recall {row['found']}/{row['crisis']}, false alarms {row['false_alarms']}/"
            f"{row['controls']}" + (f"; below target: {'; '.join(below)}" if below else "; every kind meets its target")
        )


def run_crisis_suite(suite: CrisisSuite, embedder: Any = None) -> CrisisResult:
    """The detector (``livemem.answer.crisis.detect``) on every case, each message encoded as a query is
    (``encode_one``); without an embedder, the lexicon alone."""
    from livemem.answer.crisis import detect, exemplar_matrix

    if embedder is not None:
        exemplar_matrix(embedder)  # embedded once, before the clock runs
    results = []
    for case in suite.cases:
        vector = embedder.encode_one(case.message) if embedder is not None else None
        started = time.perf_counter()
        found = detect(case.message, vector, embedder)
        elapsed = (time.perf_counter() - started) * 1000
        said = None if found is None else {
            "kind": found.kind, "kinds": list(found.kinds), "language": found.language, "matched_by": found.matched_by,
            "score": found.score,
        }  # fmt: skip
        results.append(CrisisCaseResult(case, said, round(elapsed, 4)))
    return CrisisResult(suite.name, tuple(results), embedder is not None)


def crisis_gate(result: CrisisResult, passed_before: set[str] | None) -> tuple[bool, str, list[str]]:
    """Whether a version's crisis result may be published: every kind meets its targets and no crisis message that
    the published version found (``passed_before``; None: nothing recorded) is missed now. A control that alarms
    now and did not before counts against its kind's false-alarm target only: a new detector trades a few of those
    for crises it finds, and a missed crisis is the one trade the gate never lets through. Returns (passed,
    summary, the ids of the crisis messages that regressed)."""
    regressed = sorted(
        r.case.id for r in result.failed if r.case.crisis and passed_before and r.case.id in passed_before
    )
    below = result.below_targets()
    text = result.summary() + (f"; {len(regressed)} crisis case(s) passed before and fail now" if regressed else "")
    return not below and not regressed, text, regressed


CRISIS_RECORD = "crisis_passing.json"  # in the index home: the crisis cases each gated version passed


def crisis_records(home: IndexHome) -> dict[str, set[str]]:
    """version id → the ids of the crisis cases it passed when the gate let it through (none recorded: {})."""
    import json

    path = Path(home.root) / CRISIS_RECORD
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(v): set(ids) for v, ids in data.items() if isinstance(ids, list)} if isinstance(data, dict) else {}


def write_crisis_record(home: IndexHome, version: str, result: CrisisResult, keep: int = 20) -> None:
    """Record what ``version`` passed (the last ``keep`` versions are kept), atomically."""
    import json

    records = crisis_records(home)
    records.pop(version, None)
    records[version] = result.passing_ids()
    kept = dict(list(records.items())[-keep:])
    path = Path(home.root) / CRISIS_RECORD
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({v: sorted(ids) for v, ids in kept.items()}, ensure_ascii=False), encoding="utf-8")
    tmp.replace(path)
