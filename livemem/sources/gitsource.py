"""Reading a source from git objects at a commit (never from the working tree).

The index is a function of (repository, commit): files are listed with their blob ids from the commit's tree,
their text is read from the object database, and each file's provenance (the last commit that changed it, the
first commit that added it) comes from one pass over ``git log``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import git

from livemem.errors import SourceError


@dataclass(frozen=True)
class TreeEntry:
    path: str
    blob_sha: str
    size: int


@dataclass(frozen=True)
class FileHistory:
    """Provenance of one file: the commits (and their committer times) that last changed and first added it."""

    last_commit: str
    last_time: str
    first_commit: str
    first_time: str


class GitSource:
    """A local git repository opened for reading objects."""

    def __init__(self, repo_path: Path, name: str = "") -> None:
        self.name = name or repo_path.name
        if not repo_path.exists():
            raise SourceError(f"source {self.name!r}: repository path {repo_path} does not exist")
        try:
            self.repo = git.Repo(repo_path, search_parent_directories=False)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            raise SourceError(f"source {self.name!r}: {repo_path} is not a git repository") from exc
        self.path = repo_path

    def close(self) -> None:
        self.repo.close()

    def __enter__(self) -> GitSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def resolve(self, ref: str = "HEAD") -> str:
        """The 40-hex commit id that ``ref`` names."""
        try:
            return self.repo.commit(ref).hexsha
        except (ValueError, git.BadName, git.GitCommandError) as exc:
            if ref == "HEAD":
                raise SourceError(f"source {self.name!r}: repository {self.path} has no commits yet") from exc
            raise SourceError(f"source {self.name!r}: ref {ref!r} not found in {self.path}") from exc

    def has_commit(self, commit: str) -> bool:
        try:
            return self.repo.commit(commit).type == "commit"
        except (ValueError, git.BadName, git.GitCommandError):
            return False

    def is_ancestor(self, older: str, newer: str) -> bool:
        return self.has_commit(older) and self.repo.is_ancestor(older, newer)

    def list_files(self, commit: str) -> list[TreeEntry]:
        """Every blob in the commit's tree with its id and size (submodules and symlinks excluded)."""
        return _parse_tree(self.repo.git.ls_tree("-r", "-z", "--long", "--full-tree", commit))

    def entries(self, commit: str, paths: list[str]) -> list[TreeEntry]:
        """The blobs at ``paths`` in the commit's tree (paths absent there are left out), as ``list_files``."""
        entries: list[TreeEntry] = []
        with self.repo.git.custom_environment(GIT_LITERAL_PATHSPECS="1"):
            for start in range(0, len(paths), 500):
                out = self.repo.git.ls_tree(
                    "-r", "-z", "--long", "--full-tree", commit, "--", *paths[start : start + 500]
                )
                entries += _parse_tree(out)
        wanted = set(paths)
        return [e for e in entries if e.path in wanted]

    def read_blob(self, blob_sha: str) -> bytes:
        return self.repo.odb.stream(bytes.fromhex(blob_sha)).read()

    def read_file(self, commit: str, path: str) -> bytes | None:
        """The file's bytes at a commit, or None when the commit or the path does not exist."""
        try:
            return (self.repo.commit(commit).tree / path).data_stream.read()
        except (KeyError, ValueError, git.BadName, git.GitCommandError):
            return None

    def touched_since(self, base: str | None, head: str) -> set[str] | None:
        """Paths named by any commit in ``base..head`` (as ``history`` sees them); None when ``base`` is not an
        ancestor of ``head`` (history rewritten, or the base commit is gone), so nothing can be trusted."""
        if base is None or not self.is_ancestor(base, head):
            return None
        if base == head:
            return set()
        out = self.repo.git.log("-z", "--name-only", "--no-renames", "--format=\x01%H", f"{base}..{head}")
        touched: set[str] = set()
        for record in out.split("\x01"):
            _, _, files = record.partition("\0")
            touched.update(p for p in files.lstrip("\n").split("\0") if p)
        return touched

    def history(self, head: str, paths: set[str], since: str | None = None) -> dict[str, FileHistory]:
        """Provenance of ``paths`` from one walk of ``git log`` (``since..head`` when ``since`` is given).

        Paths not touched in that range are absent from the result.
        """
        if not paths:
            return {}
        rev = f"{since}..{head}" if since else head
        out = self.repo.git.log("-z", "--name-only", "--no-renames", "--format=\x01%H %cI", rev)
        found: dict[str, FileHistory] = {}
        for record in out.split("\x01"):
            if not record:
                continue
            header, _, files = record.partition("\0")
            commit, when = header.split(" ", 1)
            for path in files.lstrip("\n").split("\0"):
                if path not in paths:
                    continue
                seen = found.get(path)
                # git log runs newest first: the first sighting is the last change, the final one the first add.
                found[path] = (
                    FileHistory(commit, when, commit, when)
                    if seen is None
                    else FileHistory(seen.last_commit, seen.last_time, commit, when)
                )
        return found


def _parse_tree(out: str) -> list[TreeEntry]:
    """Blobs of ``git ls-tree -r -z --long`` output (submodules and symlinks excluded)."""
    entries = []
    for record in out.split("\0"):
        if not record:
            continue
        meta, path = record.split("\t", 1)
        mode, kind, sha, size = meta.split()
        if kind == "blob" and mode != "120000":
            entries.append(TreeEntry(path, sha, int(size)))
    return entries
