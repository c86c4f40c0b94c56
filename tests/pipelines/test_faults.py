"""Faults and abuse against real processes: kill -9 mid-build under load, several server processes writing
traces at once, corrupt files, and a fuzzer driven by the OpenAPI document."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from support.servers import uvicorn
from support.serving import build_and_publish, commit_files, make_workspace

from livemem.usage.traces import trace_key
from livemem.version.store import IndexHome

PROJECT = Path(__file__).resolve().parents[2]
SOAK_SECONDS = float(os.environ.get("LIVEMEM_SOAK_S", "30"))

BUILD_SCRIPT = """
import sys, time
from livemem.ingest.build import build_version
from livemem.sources.config import load_sources
from livemem.model.embedding import Embedder
from livemem.version.store import IndexHome
config = load_sources(sys.argv[1])
home = IndexHome(sys.argv[2])
hold = sys.argv[3:] == ["hold"]
def progress(what, done, total):
    if hold:  # held as it starts embedding, its version half-written in staging, until the test kills it
        time.sleep(300)
result = build_version(config, home, Embedder(), progress=progress)
if result.staged:
    home.publish(result.version_id, result.base_version, config.retention)
print(result.version_id)
"""


class Load:
    """Clients sending queries in a loop until stopped; every non-200 answer or error is kept."""

    def __init__(self, url: str, clients: int = 1, keepalive: bool = True) -> None:
        self.url = url
        self.limits = httpx.Limits() if keepalive else httpx.Limits(max_keepalive_connections=0)
        self.stop = threading.Event()
        self.failures: list[str] = []
        self.responses: list[dict] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(clients)]

    def run(self, n: int) -> None:
        queries = ["SNAP food assistance", "heating bill help Beckley", "Medicaid renewal", "living memory council"]
        with httpx.Client(base_url=self.url, timeout=30, limits=self.limits) as client:
            i = 0
            while not self.stop.is_set():
                try:
                    r = client.post("/query", json={"query": f"{queries[i % 4]} {n}-{i}", "top_k": 3})
                    with self.lock:
                        if r.status_code == 200:
                            self.responses.append(r.json())
                        else:
                            self.failures.append(f"{r.status_code}: {r.text[:200]}")
                except httpx.HTTPError as exc:
                    with self.lock:
                        self.failures.append(repr(exc))
                i += 1

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)


@pytest.fixture
def served_home(tmp_path: Path, embedder):
    sources = make_workspace(tmp_path)
    home = IndexHome(tmp_path / "rag_index")
    version = build_and_publish(sources, home, embedder)
    return sources, home, version


def test_kill_9_mid_build_keeps_the_previous_version_serving(served_home) -> None:
    sources, home, first = served_home
    repo = sources.parent / "repo"
    commit_files(repo, {"benefits/new-guide.md": "# New guide\n\n" + "Winter heating help. " * 400}, "more")
    with uvicorn(home) as url, Load(url) as load:
        time.sleep(1.0)
        build = subprocess.Popen(  # held mid-build: it cannot finish between two looks at staging
            [sys.executable, "-c", BUILD_SCRIPT, str(sources), str(home.root), "hold"], cwd=PROJECT,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not any(home.staging.glob("*/tables.duckdb")):  # the build is writing its version
            assert build.poll() is None, build.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the build never started staging"
            time.sleep(0.01)
        os.kill(build.pid, signal.SIGKILL)
        build.wait()
        time.sleep(1.0)
        assert home.current() == first
        assert list(home.staging.iterdir())  # the half-written version is left aside, never published
        after_kill = len(load.responses)

        rerun = subprocess.run(
            [sys.executable, "-c", BUILD_SCRIPT, str(sources), str(home.root)], cwd=PROJECT,
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert rerun.returncode == 0, rerun.stderr[-2000:]
        second = rerun.stdout.strip().splitlines()[-1]
        assert home.current() == second != first
        deadline = time.monotonic() + 20
        while load.responses[-1]["index_version"] != second and time.monotonic() < deadline:
            time.sleep(0.1)
    assert load.failures == []
    assert after_kill > 0
    assert {r["index_version"] for r in load.responses} == {first, second}
    assert [p.name for p in home.staging.iterdir()] == []  # the next build cleared the leftover


def test_four_server_processes_lose_no_trace_line(served_home) -> None:
    _, home, _ = served_home
    # a new connection per request, so requests spread over every worker once it is up
    with uvicorn(home, workers=4, timeout=240) as url, Load(url, clients=8, keepalive=False) as load:
        time.sleep(SOAK_SECONDS)
    assert load.failures == []
    expected = {}
    for response in load.responses:
        expected[trace_key(response["trace_id"])] = max(1, len(response["results"]))  # events name it by its key
    lines = []
    for path in sorted(home.traces.glob("*.jsonl")):
        lines.extend(path.read_text(encoding="utf-8").splitlines())
    events = [json.loads(line) for line in lines]  # every line parses
    seen: dict[str, int] = {}
    for event in events:
        seen[event["trace_id"]] = seen.get(event["trace_id"], 0) + 1
    assert seen == expected
    assert len({p.name.rsplit("-", 1)[-1] for p in home.traces.glob("*.jsonl")}) >= 2  # several processes wrote


@pytest.mark.parametrize("damage", ["garbage_manifest", "truncated_tables", "missing_segment"])
def test_damaged_current_version_is_503_and_never_wrong_data(served_home, embedder, damage: str) -> None:
    """CURRENT naming a damaged version: /healthz is a 503 naming it; queries never see its data, they are answered
    from the last good version the worker holds (a fresh worker answers 503: tests/pipelines/test_version_integrity.py)."""
    from fastapi.testclient import TestClient

    from serving.app import create_app
    from serving.settings import Settings

    _, home, version = served_home
    broken = "20990101T000000000000Z"
    shutil.copytree(home.version_dir(version), home.version_dir(broken))
    target = home.version_dir(broken)
    if damage == "garbage_manifest":
        (target / "manifest.json").write_text("{ this is not json", encoding="utf-8")
    elif damage == "truncated_tables":
        data = (target / "tables.duckdb").read_bytes()
        (target / "tables.duckdb").write_bytes(data[: len(data) // 3])
    else:  # the version names a segment that is not there (removed by hand from parts/)
        manifest = json.loads((target / "manifest.json").read_text(encoding="utf-8"))
        manifest["segments"] = [{"id": "seg-" + "0" * 32, "chunks": 1, "parents": 1}]
        (target / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with TestClient(create_app(Settings(index_dir=home.root, warm_up=False), embedder)) as client:
        assert client.post("/query", json={"query": "SNAP"}).status_code == 200
        (home.root / "CURRENT").write_text(broken + "\n")
        health = client.get("/healthz")
        assert health.status_code == 503 and broken in health.json()["detail"]
        answered = client.post("/query", json={"query": "SNAP"})
        assert answered.status_code == 200 and answered.json()["index_version"] == version


@pytest.fixture(scope="module")
def complete_index(tmp_path_factory, embedder):
    """The bundled example materialized whole: chunks, GBIM entities and the registry."""
    from dagster import DagsterInstance

    from orchestration.definitions import build_definitions

    root = tmp_path_factory.mktemp("complete")
    defs = build_definitions(PROJECT / "examples" / "sources.yaml", root / "rag_index")
    instance = DagsterInstance.ephemeral()
    for job in ("build_index", "export_gbim", "verify_registry"):
        assert defs.resolve_job_def(job).execute_in_process(instance=instance).success, job
    return IndexHome(root / "rag_index")


# Examples per operation (a third of them for requests that break the schema); a long run: LIVEMEM_FUZZ_EXAMPLES=500
FUZZ_EXAMPLES = int(os.environ.get("LIVEMEM_FUZZ_EXAMPLES", "30"))


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_openapi_fuzzing_finds_no_server_error(complete_index, embedder, mode) -> None:
    """Requests the OpenAPI document allows (positive) and requests it forbids (negative: wrong types, missing
    fields, values out of range): an answer for each, never a 5xx."""
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode

    from serving.app import create_app
    from serving.settings import Settings

    app = create_app(Settings(index_dir=complete_index.root, warm_up=False), embedder)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    failures: list[str] = []
    operations = 0  # the operations fuzzed (in negative mode, those with something to break)
    for operation in schema.get_all_operations():
        examples = FUZZ_EXAMPLES if mode == "positive" else max(1, FUZZ_EXAMPLES // 3)

        @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(operation.ok().as_strategy(generation_mode=GenerationMode(mode)))
        def check(case) -> None:
            response = case.call()
            if response.status_code >= 500:
                failures.append(f"{case.method} {case.formatted_path} → {response.status_code}: {response.text[:200]}")

        try:
            check()
            operations += 1
        except Unsatisfiable:  # an operation without parameters or body has no request that breaks its schema
            assert mode == "negative", operation.label
    assert operations >= 8
    assert failures == []


NOT_JSON_NUMBERS = ("NaN", "Infinity", "-Infinity", "1e999")


def _replace(value, numbers: object | None = None, strings: object | None = None):
    """``value`` with every number (not bool) replaced by ``numbers`` and every string by ``strings``."""
    if isinstance(value, dict):
        return {k: _replace(v, numbers, strings) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace(v, numbers, strings) for v in value]
    if numbers is not None and isinstance(value, int | float) and not isinstance(value, bool):
        return numbers
    if strings is not None and isinstance(value, str):
        return strings
    return value


def _hostile_bodies(body, max_body: int) -> dict[str, tuple[str, int]]:
    """Variants of a valid JSON body, by name: (text, the status it must get)."""
    variants = {}
    for token in NOT_JSON_NUMBERS:
        text = json.dumps(_replace(body, numbers="@number@"))
        if "@number@" in text:
            variants[token] = (text.replace('"@number@"', token), 422)
    text = json.dumps(_replace(body, strings="\ud800 heat"))  # ensure_ascii writes the lone surrogate as \ud800
    if "\\ud800" in text:
        variants["lone surrogate"] = (text, 422)
    variants["oversize"] = (json.dumps(body) + " " * max_body, 413)  # valid JSON, only too big
    return variants


def test_openapi_fuzzing_with_non_json_numbers_surrogates_and_oversize_bodies(complete_index, embedder) -> None:
    """Every JSON body the schema allows, made hostile: 422 or 413 with a short answer, never a 5xx."""
    schemathesis = pytest.importorskip("schemathesis")
    from fastapi.testclient import TestClient
    from hypothesis import HealthCheck, given, settings

    from serving.app import create_app
    from serving.settings import Settings

    max_body = 65536
    app = create_app(Settings(index_dir=complete_index.root, warm_up=False, max_body_bytes=max_body), embedder)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    failures: list[str] = []
    tried: set[str] = set()
    with TestClient(app) as client:
        for operation in schema.get_all_operations():
            operation = operation.ok()
            if operation.method.upper() != "POST":
                continue

            @settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), database=None)
            @given(operation.as_strategy())
            def check(case) -> None:
                if not isinstance(case.body, dict | list):
                    return
                for name, (text, status) in _hostile_bodies(case.body, max_body).items():
                    tried.add(name)
                    response = client.post(
                        case.formatted_path,
                        params=case.query,
                        content=text.encode(),
                        headers={"content-type": "application/json"},
                    )
                    if response.status_code != status or len(response.content) > 10_000:
                        failures.append(
                            f"{case.formatted_path} with {name} → {response.status_code} "
                            f"({len(response.content)} bytes): {response.text[:200]}"
                        )

            check()
    assert tried == {*NOT_JSON_NUMBERS, "lone surrogate", "oversize"}
    assert failures == []
