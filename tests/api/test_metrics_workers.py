"""/metrics of a real uvicorn with two worker processes: one total across workers, never going back, parseable by
Prometheus' own parser, with process metrics, and the same for every caller but the per-role chunk count."""

from __future__ import annotations

import json
import os

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.servers import uvicorn
from support.serving import API_KEYS, INTERNAL_KEY, build_and_publish, make_workspace

from livemem.version.store import IndexHome


@pytest.fixture
def served_home(tmp_path, embedder) -> IndexHome:
    home = IndexHome(tmp_path / "rag_index")
    build_and_publish(make_workspace(tmp_path), home, embedder)
    return home


def scrape(url: str, key: str | None = None) -> dict[str, list]:
    headers = {"X-API-Key": key} if key else {}
    response = httpx.get(f"{url}/metrics", headers=headers, timeout=10)
    assert response.status_code == 200
    return {family.name: family.samples for family in text_string_to_metric_families(response.text)}


def total(families: dict[str, list], name: str, **labels: str) -> float:
    return sum(s.value for s in families[name] if s.name == f"{name}_total" and labels.items() <= s.labels.items())


def test_two_workers_count_every_request_once_and_never_reset(served_home, monkeypatch) -> None:
    monkeypatch.setenv("RAG_API_KEYS", json.dumps(API_KEYS))
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    stale = served_home.root / "cache" / "metrics" / "999999999-1"
    stale.mkdir(parents=True, exist_ok=True)  # a supervisor that is gone: its counters must not be summed in
    (stale / "counter_1.db").write_bytes(b"\0" * 8)
    with uvicorn(served_home, workers=2) as url:
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
    assert os.listdir(served_home.root / "cache" / "metrics")  # this supervisor's files, removed by the next one
