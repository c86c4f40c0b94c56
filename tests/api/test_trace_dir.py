"""One setting for the trace directory: usage the serving app writes under ``RAG_TRACE_DIR`` is what the nightly
rollup counts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance
from fastapi.testclient import TestClient
from support.serving import build_and_publish, make_workspace

import livemem.usage.traces
from livemem.settings import TraceSettings
from livemem.version.store import IndexHome
from orchestration.definitions import build_definitions
from serving.app import create_app
from serving.settings import Settings

YESTERDAY_NOON = (datetime.now(UTC) - timedelta(days=1)).replace(hour=12, minute=0, second=0, microsecond=0)


class Yesterday(datetime):
    """The serving app's clock set to yesterday noon (UTC): the rollup runs on completed days only."""

    @classmethod
    def now(cls, tz=None):
        return YESTERDAY_NOON if tz is None else YESTERDAY_NOON.astimezone(tz)


def test_trace_dir_defaults_to_the_index_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAG_TRACE_DIR", raising=False)
    assert TraceSettings.from_env().directory(tmp_path / "index") == tmp_path / "index" / "traces"
    assert Settings.from_env(index_dir=tmp_path / "index").traces_path == tmp_path / "index" / "traces"
    elsewhere = {"RAG_TRACE_DIR": str(tmp_path / "elsewhere")}
    assert TraceSettings.from_mapping(elsewhere).directory(tmp_path / "index") == tmp_path / "elsewhere"
    assert Settings.from_mapping(elsewhere).traces_path == tmp_path / "elsewhere"


def test_rollup_counts_usage_written_under_rag_trace_dir(
    tmp_path: Path, embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = make_workspace(tmp_path)
    home = IndexHome(tmp_path / "rag_index")
    build_and_publish(sources, home, embedder)
    trace_dir = tmp_path / "writable-traces"
    monkeypatch.setenv("RAG_TRACE_DIR", str(trace_dir))
    monkeypatch.delenv("RAG_TRACE_DSN", raising=False)
    monkeypatch.setattr(livemem.usage.traces, "datetime", Yesterday)

    settings = Settings.from_env(index_dir=home.root, warm_up=False, cache_size=0)
    with TestClient(create_app(settings, embedder)) as client:
        for query in ("SNAP food assistance", "heating bill help Beckley"):
            response = client.post("/query", json={"query": query, "top_k": 2, "mode": "sparse"})
            assert response.status_code == 200, response.text
    written = sorted(p.name for p in trace_dir.glob("*.jsonl"))
    assert written and all(name.startswith(YESTERDAY_NOON.strftime("%Y-%m-%d")) for name in written)
    assert not list(home.traces.glob("*.jsonl"))  # nothing went to the default directory

    defs = build_definitions(sources, home.root)
    result = defs.resolve_job_def("attention_rollup_job").execute_in_process(
        instance=DagsterInstance.ephemeral(), partition_key=YESTERDAY_NOON.date().isoformat()
    )
    assert result.success
    rollup = next(
        e.materialization.metadata
        for e in result.get_asset_materialization_events()
        if e.asset_key == AssetKey("attention_rollup")
    )
    assert rollup["trace_files"].value == written
    lines = sum(len((trace_dir / name).read_text(encoding="utf-8").splitlines()) for name in written)
    assert rollup["trace_events"].value == lines > 0
    assert rollup["malformed_lines"].value == 0
    assert rollup["chunks_used"].value >= 2
    assert rollup["status"].value == "staged"
    manifest = home.current_manifest()
    assert manifest["attention"]["last_rollup_day"] == YESTERDAY_NOON.date().isoformat()
