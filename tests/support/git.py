"""A real git repository in a temp dir for tests (``make_repo`` in ``tests/conftest.py`` makes them)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


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
