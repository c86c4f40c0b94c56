"""Reading a source from git objects at a commit (never from the working tree).

The index is a function of (repository, commit): files are listed with their blob ids from the commit's tree,
their text is read from the object database, and each file's provenance (the last commit that changed it, the
first commit that added it) comes from one pass over ``git log``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import git

from livemem.errors import SourceError

READ_PIECE = 1 << 20  # bytes of a blob read at a time past what is kept (``GitSource.read_prefix``)


@dataclass(frozen=True)
class TreeEntry:
    """A blob of a commit's tree. ``problem`` names why its path cannot be indexed (``non_utf8_name``: not UTF-8;
    ``unsafe_name``: a ``.``/``..``/``.git`` component, an empty one, a ``/`` inside one name, a control character),
    and ``path`` is then a printable form of it (``caf\\xe9.md``, ``a\\x2fb.md``): the build reports such a file as
    skipped instead of reading it."""

    path: str
    blob_sha: str
    size: int
    problem: str | None = None


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
        # GitPython annotates Commit, but passes both revs to `git merge-base` and takes any rev string
        return self.has_commit(older) and self.repo.is_ancestor(older, newer)  # type: ignore[arg-type]

    def list_files(self, commit: str) -> list[TreeEntry]:
        """Every blob in the commit's tree with its id and size (submodules and symlinks excluded); a blob whose
        path cannot be indexed carries its ``problem`` (``TreeEntry``)."""
        try:
            out = self.repo.git.ls_tree("-r", "-t", "-z", "--long", "--full-tree", commit)
        except git.GitCommandError as exc:
            if not self.has_commit(commit):
                raise SourceError(
                    f"source {self.name!r}: commit {commit} is not in repository {self.path} (history rewritten "
                    "and the commit garbage-collected?)"
                ) from exc
            raise
        return [entry for _, entry in _parse_tree(out)]

    def entries(self, commit: str, paths: list[str]) -> list[TreeEntry]:
        """The blobs at ``paths`` (as ``git log`` names them) in the commit's tree (paths absent there are left
        out), as ``list_files``."""
        found: list[tuple[str, TreeEntry]] = []
        with self.repo.git.custom_environment(GIT_LITERAL_PATHSPECS="1"):
            for start in range(0, len(paths), 500):
                out = self.repo.git.ls_tree(
                    "-r", "-t", "-z", "--long", "--full-tree", commit, "--", *paths[start : start + 500]
                )
                found += _parse_tree(out)
        wanted = set(paths)
        return [entry for raw, entry in found if raw in wanted]

    def read_blob(self, blob_sha: str) -> bytes:
        return self.read_prefix(blob_sha)[0]

    def read_prefix(self, blob_sha: str, limit: int | None = None) -> tuple[bytes, int]:
        """A blob's first ``limit`` bytes (all of it when None) and its whole size. Only what is returned is held
        in memory: the rest is streamed past in ``READ_PIECE`` pieces (``git cat-file --batch`` hands it over)."""
        stream = self.repo.odb.stream(bytes.fromhex(blob_sha))
        size = stream.size
        data = stream.read(size if limit is None else min(size, limit))
        while stream.read(READ_PIECE):  # drained here: GitPython would read the rest in one piece
            pass
        return data, size

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
        out = self.repo.git.log("-z", "--name-only", "--no-renames", "--format=%x00%H", f"{base}..{head}")
        return {path for _, paths in _log_records(out) for path in paths}

    def history(self, head: str, paths: set[str], since: str | None = None) -> dict[str, FileHistory]:
        """Provenance of ``paths`` from one walk of ``git log`` (``since..head`` when ``since`` is given).

        Paths not touched in that range are absent from the result.
        """
        if not paths:
            return {}
        rev = f"{since}..{head}" if since else head
        out = self.repo.git.log("-z", "--name-only", "--no-renames", "--format=%x00%H %cI", rev)
        found: dict[str, FileHistory] = {}
        for header, files in _log_records(out):
            commit, when = header.split(" ", 1)
            for path in files:
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


def _log_records(out: str) -> Iterator[tuple[str, list[str]]]:
    """(header, paths) of each commit of ``git log -z --name-only --format=%x00<header>`` output. A header follows
    an empty field (a path is never empty), so no byte a file name may hold (``\\x01``, newlines) can split a
    record; the first path of a commit follows a newline."""
    fields = out.split("\0")
    i = 0
    while i < len(fields):
        if fields[i]:  # nothing but the output's end comes outside a record
            i += 1
            continue
        if i + 1 >= len(fields) or not fields[i + 1]:
            i += 1
            continue
        paths: list[str] = []
        header, i = fields[i + 1], i + 2
        while i < len(fields) and fields[i]:
            paths.append(fields[i][1:] if not paths and fields[i].startswith("\n") else fields[i])
            i += 1
        yield header, paths


def name_problem(path: str) -> str | None:
    """Why a path (as git names it) cannot be indexed, else None: ``non_utf8_name`` when it is not UTF-8 (it then
    holds surrogate escapes), ``unsafe_name`` when a component is empty, ``.``, ``..`` or ``.git`` (any case) or it
    holds a control character."""
    if any("\udc80" <= c <= "\udcff" for c in path):
        return "non_utf8_name"
    if _CONTROL.search(path) or any(part in ("", ".", "..") or part.lower() == ".git" for part in path.split("/")):
        return "unsafe_name"
    return None


def printable(path: str) -> str:
    """A path as it can be stored, logged and shown: bytes that are not UTF-8 and control characters as
    ``\\xNN``."""
    text = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


_CONTROL = re.compile("[\x00-\x1f\x7f]")


def _parse_tree(out: str) -> list[tuple[str, TreeEntry]]:
    """(path as git names it, entry) of each blob of ``git ls-tree -r -t -z --long`` output (submodules and
    symlinks excluded), first come first kept when two show the same path.

    A tree entry whose name holds a ``/`` (only a crafted tree object can) shows up under a directory that was
    never listed as a tree: its name is what follows the nearest listed one (``/`` in it is shown as ``\\x2f``).
    Everything under a tree that cannot be indexed cannot be either."""
    trees: dict[str, tuple[str, str | None]] = {"": ("", None)}  # path -> (shown path, problem)
    entries: list[tuple[str, TreeEntry]] = []
    seen: set[str] = set()
    for record in out.split("\0"):
        if not record:
            continue
        meta, path = record.split("\t", 1)
        mode, kind, sha, size = meta.split()
        parent = path.rpartition("/")[0]
        while parent not in trees:  # a name holding "/": its tree is the nearest listed prefix
            parent = parent.rpartition("/")[0]
        name = path[len(parent) + 1 :] if parent else path
        parent_shown, parent_problem = trees[parent]
        problem = parent_problem or name_problem(path) or ("unsafe_name" if "/" in name else None)
        shown = path
        if problem is not None:
            shown = printable(name).replace("/", "\\x2f")
            shown = f"{parent_shown}/{shown}" if parent else shown
        if kind == "tree":
            trees[path] = (shown, problem)
        elif kind == "blob" and mode != "120000" and shown not in seen:
            seen.add(shown)
            entries.append((path, TreeEntry(shown, sha, int(size), problem)))
    return entries
