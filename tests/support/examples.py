"""The bundled example (``examples/``) for tests that build it."""

from __future__ import annotations

import shutil
from pathlib import Path

from livemem.sources.config import PROJECT_ROOT
from support.git import GitRepo

SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"  # ../shared/data beside the project (real data by others)


def copy_bundled_example(tmp_path: Path) -> tuple[GitRepo, Path]:
    """The bundled example in a git repository of its own (``repo: ..`` resolves to it, as in the project)."""
    repo = GitRepo(tmp_path / "project")
    shutil.copytree(PROJECT_ROOT / "examples", repo.path / "examples")
    repo.commit(message="bundled example")
    return repo, repo.path / "examples" / "sources.yaml"
