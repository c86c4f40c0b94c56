"""Chroma is an optional extra (``living-memory[chroma]``): real ``livemem`` processes in which ``chromadb`` cannot be
imported build, publish and answer the bundled example; when the configuration asks for Chroma (``CHROMA_HOST``, or
``index.vector_store: chroma``) the build is refused before anything is written, naming the setting and the install
command, and the published version keeps serving."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.examples import copy_bundled_example

from livemem.version.store import IndexHome

PROJECT = Path(__file__).resolve().parents[2]
INSTALL = "pip install 'living-memory[chroma]'"

# Put first on PYTHONPATH, Python imports it at start-up: any import of chromadb fails as if it were not installed.
NO_CHROMADB = """\
import sys


class NoChromadb:
    def find_spec(self, name, path=None, target=None):
        if name == "chromadb" or name.startswith("chromadb."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoChromadb())
"""


class Workspace:
    """The bundled example in its own git repository, an index home and a Dagster instance, for ``livemem``."""

    def __init__(self, root: Path) -> None:
        self.repo, self.sources = copy_bundled_example(root)
        self.home = IndexHome(root / "index")
        self.dagster = root / "dagster_home"
        self.dagster.mkdir()
        (self.dagster / "dagster.yaml").write_text((PROJECT / "deploy" / "dagster.yaml").read_text())
        self.blocker = root / "no_chromadb"
        self.blocker.mkdir()
        (self.blocker / "sitecustomize.py").write_text(NO_CHROMADB, encoding="utf-8")

    def livemem(self, *args: str, **env: str) -> subprocess.CompletedProcess:
        """``livemem`` in its own process without chromadb; ``env`` added to an environment without CHROMA_*."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("CHROMA_")}
        base |= {
            "PYTHONPATH": os.pathsep.join([str(self.blocker), str(PROJECT)]),
            "DAGSTER_HOME": str(self.dagster),
            "HF_HUB_OFFLINE": "1",
            "COLUMNS": "2000",  # one line per message: rich wraps at the terminal width
        }
        command = [sys.executable, "-m", "orchestration.cli", "--sources", str(self.sources)]
        return subprocess.run(
            [*command, "--index-dir", str(self.home.root), *args], cwd=PROJECT, env=base | env, text=True,
            capture_output=True, timeout=300,
        )  # fmt: skip

    def written(self) -> tuple[str | None, list[str], list[str]]:
        """CURRENT, the published versions and whatever is in staging."""
        staged = sorted(p.name for p in self.home.staging.iterdir()) if self.home.staging.is_dir() else []
        return self.home.current(), self.home.published_versions(), staged


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """The bundled example built and published by ``livemem materialize`` in a process without chromadb."""
    ws = Workspace(tmp_path_factory.mktemp("no-chromadb"))
    built = ws.livemem("materialize", "--job", "build_index")
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-4000:]
    return ws


def test_without_chromadb_the_bundled_example_builds_publishes_and_answers(published: Workspace) -> None:
    manifest = published.home.current_manifest()
    assert manifest is not None and manifest["vector_store"] == "none"
    assert not (published.home.version_dir(manifest["version_id"]) / "chroma").exists()

    asked = published.livemem("query", "heating bill help in Beckley", "--top-k", "3", "--json")
    assert asked.returncode == 0, asked.stderr[-4000:]
    answer = json.loads(asked.stdout)
    assert answer["results"][0]["provenance"]["path"] == "examples/corpus/benefits/raleigh-county.md"


@pytest.mark.parametrize(
    ("job", "asked_by"),
    [("build_index", "CHROMA_HOST"), ("build_index", "index.vector_store"), ("export_gbim", "CHROMA_HOST")],
)
def test_chroma_asked_for_without_chromadb_is_refused_before_anything_is_written(
    published: Workspace, job: str, asked_by: str
) -> None:
    before = published.written()
    sources = published.sources.read_text(encoding="utf-8")
    env = {}
    if asked_by == "CHROMA_HOST":
        env = {"CHROMA_HOST": "127.0.0.1", "CHROMA_PORT": "9"}  # never contacted: refused before
        setting = "CHROMA_HOST=127.0.0.1"
    else:
        published.sources.write_text(
            sources.replace("index:\n", "index:\n  vector_store: chroma\n", 1), encoding="utf-8"
        )
        setting = f"{published.sources}: index.vector_store: chroma"
    try:  # each would stage a new version (the manifest records the vector store; no GBIM yet), were it not refused
        refused = published.livemem("materialize", "--job", job, **env)
    finally:
        published.sources.write_text(sources, encoding="utf-8")
    assert refused.returncode != 0
    error = refused.stderr.splitlines()[-1]
    assert error.startswith(f"error: {job} failed") and "ChromaNotInstalled" in error, refused.stderr[-3000:]
    assert setting in error and "chromadb is not installed" in error and INSTALL in error
    assert published.written() == before  # nothing staged, nothing published: the same version keeps answering
