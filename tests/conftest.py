"""Shared fixtures: real git repositories in temp dirs, one embedding model per test session.

The tests are in layers, one folder each, and each test is marked with its layer (``pytest -m unit``):

- ``unit/``: one module at a time (chunking, fusion, BM25 and the dense scan, settings, registry and GBIM parsing);
- ``pipelines/``: builds, versions and Dagster assets over real git repositories, DuckDB files and segments;
- ``api/``: the HTTP app (FastAPI's TestClient or a real uvicorn), MCP and the CLI;
- ``integration/``: external services: Postgres (``postgres``), PostGIS, a Chroma server (``chroma_server``) and a
  browser (``browser``, also the glassbox page in ``api/``).

Helpers that tests of several layers share are in the ``support`` package (``from support.servers import uvicorn``,
``support.gbim_data``, ``support.examples``, ``support.git``, ``support.build_workers``); no test module imports
another.

Every test that asks for the embedding model (the ``embedder`` fixture) is also marked ``model``: ``make
test-unit`` runs ``pytest tests/unit -m "not model"``, which loads no model. The summary at the end of a run gives
the time spent in each layer.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TESTS = Path(__file__).resolve().parent
LAYERS = ("unit", "pipelines", "api", "integration")
_LAYER_SECONDS: dict[str, float] = {}
# helpers shared across layers live in the ``support`` package beside this file (``from support.servers import
# uvicorn``; a test module never imports another): its parent, this folder, is importable, and no layer's folder is
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from support.git import GitRepo  # noqa: E402 - importable once this folder is on sys.path

# the external service each module needs, as a marker (``pytest -m "not postgres"``)
SERVICES = {
    "test_registry_postgres": "postgres",
    "test_scaleout_postgres": "postgres",
    "test_traces_postgres": "postgres",
    "test_gbim_postgis": "postgres",
    "test_chroma_server": "chroma_server",
    "test_dagster_ui": "browser",
    "test_glassbox": "browser",
}


def _layer(path: Path) -> str | None:
    try:
        first = Path(path).resolve().relative_to(TESTS).parts[0]
    except ValueError:
        return None
    return first if first in LAYERS else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its layer (its folder), the service it needs, and ``model`` when it uses the embedding
    model."""
    for item in items:
        layer = _layer(item.path)
        if layer:
            item.add_marker(getattr(pytest.mark, layer))
        service = SERVICES.get(Path(item.path).stem)
        if service:
            item.add_marker(getattr(pytest.mark, service))
        if "embedder" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.model)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    layer = _layer(Path(str(report.fspath)).resolve()) if report.fspath else None
    if layer:
        _LAYER_SECONDS[layer] = _LAYER_SECONDS.get(layer, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter) -> None:
    if _LAYER_SECONDS:
        times = ", ".join(f"{layer} {_LAYER_SECONDS[layer]:.1f} s" for layer in LAYERS if layer in _LAYER_SECONDS)
        terminalreporter.write_line(f"time per layer (set-up, test and teardown): {times}")


@pytest.fixture
def make_repo(tmp_path: Path) -> Callable[..., GitRepo]:
    def factory(name: str = "repo", files: dict[str, str | bytes] | None = None) -> GitRepo:
        repo = GitRepo(tmp_path / name)
        if files:
            repo.commit(files, message="initial import")
        return repo

    return factory


@pytest.fixture(scope="session")
def embedder():
    """The real all-MiniLM-L6-v2 embedder, loaded once per test session."""
    from livemem.model.embedding import Embedder

    emb = Embedder(threads=2)
    emb.model  # noqa: B018 - load now, once
    return emb


def write_sources(path: Path, body: str) -> Path:
    path.write_text(body, encoding="utf-8")
    return path
