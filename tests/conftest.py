"""Shared fixtures: real git repositories in temp dirs, one embedding model per test session.

The tests are in layers, one folder each, and each test is marked with its layer (``pytest -m unit``):

- ``unit/``: one module at a time (chunking, fusion, BM25 and the dense scan, settings, registry and GBIM parsing);
- ``pipelines/``: builds, versions and Dagster assets over real git repositories, DuckDB files and segments;
- ``api/``: the HTTP app (FastAPI's TestClient or a real uvicorn), MCP and the CLI;
- ``integration/``: external services: Postgres (``postgres``), PostGIS, a Chroma server (``chroma_server``) and a
  browser (``browser``, also the glassbox page in ``api/``).

Every test that asks for the embedding model (the ``embedder`` fixture) is also marked ``model``: ``make
test-unit`` runs ``pytest tests/unit -m "not model"``, which loads no model. The summary at the end of a run gives
the time spent in each layer.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SHARED_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
TESTS = Path(__file__).resolve().parent
LAYERS = ("unit", "pipelines", "api", "integration")
_LAYER_SECONDS: dict[str, float] = {}
# a few test modules share helpers with another layer's (``from test_faults import uvicorn``): every layer's folder
# is importable, as the flat folder was (the support modules beside this file are, through pytest's rootdir)
for _layer_dir in LAYERS:
    if str(TESTS / _layer_dir) not in sys.path:
        sys.path.append(str(TESTS / _layer_dir))
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


class GitRepo:
    """A real git repository in a temp dir, committed to with the git command line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.clock = 1_700_000_000
        path.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        env = {
            **os.environ,
            "GIT_AUTHOR_NAME": "Test Author",
            "GIT_AUTHOR_EMAIL": "author@example.org",
            "GIT_COMMITTER_NAME": "Test Author",
            "GIT_COMMITTER_EMAIL": "author@example.org",
            "GIT_AUTHOR_DATE": f"@{self.clock} +0000",
            "GIT_COMMITTER_DATE": f"@{self.clock} +0000",
        }
        return subprocess.run(
            ["git", *args], cwd=self.path, env=env, check=True, capture_output=True, text=True
        ).stdout.strip()

    def commit(
        self, files: dict[str, str | bytes] | None = None, delete: list[str] = (), message: str = "change"
    ) -> str:
        """Write and delete files, commit them one hour after the previous commit, return the commit id."""
        self.clock += 3600
        for rel, content in (files or {}).items():
            target = self.path / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content, encoding="utf-8")
        for rel in delete:
            (self.path / rel).unlink()
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.head()

    def head(self) -> str:
        return self.git("rev-parse", "HEAD")


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
    from livemem.ingest.embedding import Embedder

    emb = Embedder(threads=2)
    emb.model  # noqa: B018 - load now, once
    return emb


def write_sources(path: Path, body: str) -> Path:
    path.write_text(body, encoding="utf-8")
    return path
