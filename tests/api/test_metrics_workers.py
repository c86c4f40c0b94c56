"""/metrics of a real uvicorn with two worker processes: one total across workers, never going back, parseable by
Prometheus' own parser, with process metrics, and the same for every caller but the per-role chunk count. Issue 49:
the counters each worker keeps itself (answer cache, /context responses, audit records, warm-up runs, process CPU)
went backwards between scrapes or were in one worker's scrapes only."""

from __future__ import annotations

import json
import os

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.servers import uvicorn
from support.serving import API_KEYS, INTERNAL_KEY, build_and_publish, make_workspace

from livemem.version.store import IndexHome


@pytest.fixture(scope="module")
def served_home(tmp_path_factory, embedder) -> IndexHome:
    root = tmp_path_factory.mktemp("metrics-workers")
    home = IndexHome(root / "rag_index")
    build_and_publish(make_workspace(root), home, embedder)
    return home


@pytest.fixture(scope="module")
def server(served_home):
    """One real uvicorn with two workers for the module (its start is most of the time): (its URL, the metrics
    directory of a supervisor that is gone, made before it started)."""
    stale = served_home.root / "cache" / "metrics" / "999999999-1"
    stale.mkdir(parents=True, exist_ok=True)  # a supervisor that is gone: its counters must not be summed in
    (stale / "counter_1.db").write_bytes(b"\0" * 8)
    with pytest.MonkeyPatch.context() as env:  # the uvicorn process inherits this environment
        env.setenv("RAG_API_KEYS", json.dumps(API_KEYS))
        env.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
        with uvicorn(served_home, workers=2, timeout=300) as url:  # two workers' startups on a loaded machine
            yield url, stale
    assert os.listdir(served_home.root / "cache" / "metrics")  # this supervisor's files, removed by the next one


def scrape(url: str, key: str | None = None) -> dict[str, list]:
    headers = {"X-API-Key": key} if key else {}
    response = httpx.get(f"{url}/metrics", headers=headers, timeout=10)
    assert response.status_code == 200
    return {family.name: family.samples for family in text_string_to_metric_families(response.text)}


def total(families: dict[str, list], name: str, **labels: str) -> float:
    return sum(s.value for s in families[name] if s.name == f"{name}_total" and labels.items() <= s.labels.items())


def counters(families: dict[str, list]) -> dict[tuple, float]:
    """Every ``*_total`` sample of a scrape, by name and labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for samples in families.values()
        for s in samples
        if s.name.endswith("_total")
    }


# kept by each worker's context service (serving.services.context), summed across workers in every scrape
CONTEXT_COUNTERS = ("livemem_answer_cache_hits", "livemem_answer_cache_misses", "livemem_context_responses",
                    "livemem_audit_records", "livemem_warm_up_runs", "livemem_answer_fallbacks")  # fmt: skip


def test_two_workers_every_counter_only_grows_and_context_counters_are_in_every_scrape(server) -> None:
    url, _ = server
    with httpx.Client(base_url=url, timeout=60) as http:
        close = {"Connection": "close"}  # a new connection each time: both workers answer

        def ask(i: int) -> None:
            for path, body in [("/context", {"message": "how do I ask the living memory API for chunks"}),
                               ("/context", {"message": f"fetch memory query number {i}"}),
                               ("/query", {"query": f"living memory client {i % 3}"})]:  # fmt: skip
                assert http.post(path, json=body, headers=close).status_code == 200

        for i in range(3):  # the same message three times: at least one worker answers it again from its cache
            ask(i)
        seen: dict[tuple, float] = {}
        for i in range(10):
            families = scrape(url)
            now = counters(families)
            went_back = {k: (v, now.get(k)) for k, v in seen.items() if now.get(k) is None or now[k] < v}
            assert not went_back, f"scrape {i}: {went_back}"
            for name in CONTEXT_COUNTERS:
                assert any(s.name == f"{name}_total" for s in families.get(name, [])), (i, name)
            hits = total(families, "livemem_answer_cache_hits", kind="context")
            misses = total(families, "livemem_answer_cache_misses", kind="context")
            assert hits >= 1 and misses >= 2
            ratio = [s.value for s in families["livemem_answer_cache_hit_ratio"] if s.labels == {"kind": "context"}]
            assert ratio == [pytest.approx(hits / (hits + misses))]  # of the totals, not of one worker
            assert total(families, "process_cpu_seconds") > 0
            seen = now
            if i % 3 == 0:
                ask(10 + i)
        assert total(scrape(url), "livemem_context_responses") >= 6 * 2  # every /context, whichever worker


def test_two_workers_count_every_request_once_and_never_reset(server) -> None:
    url, stale = server
    assert not stale.exists()
    before = total(scrape(url), "livemem_http_requests", route="/healthz")  # the helper's readiness polls
    seen: list[float] = [before]
    with httpx.Client(timeout=30) as client:  # a new connection each time: both workers answer
        for i in range(20):
            r = client.get(f"{url}/healthz", headers={"Connection": "close"})
            assert r.status_code == 200
            if i % 4 == 3:
                seen.append(total(scrape(url), "livemem_http_requests", route="/healthz"))
    families = scrape(url)
    seen.append(total(families, "livemem_http_requests", route="/healthz"))
    assert seen == sorted(seen) and seen[-1] == before + 20  # monotonic, and every request counted once
    for _ in range(8):  # scrapes answered by both workers agree
        r = httpx.get(f"{url}/metrics", headers={"Connection": "close"}, timeout=10)
        fams = {f.name: f.samples for f in text_string_to_metric_families(r.text)}
        assert total(fams, "livemem_http_requests", route="/healthz") == before + 20
        assert fams["process_start_time_seconds"][0].value > 0
    assert "process_resident_memory_bytes" in families and "process_cpu_seconds" in families
    assert "livemem_http_request_duration_seconds" in families
    public, internal = scrape(url), scrape(url, INTERNAL_KEY)
    chunks = {k: v for k, v in public.items() if k == "livemem_index_chunks"}
    assert chunks and internal["livemem_index_chunks"][0].value > public["livemem_index_chunks"][0].value
    names = {"livemem_http_requests", "livemem_cache_hits", "livemem_trace_events", "livemem_index_swaps"}
    assert names <= public.keys() and names <= internal.keys()
