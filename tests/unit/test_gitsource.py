"""Reading sources from git objects: provenance, history, errors."""

from pathlib import Path

import pytest

from livemem.errors import SourceError
from livemem.sources.gitsource import GitSource


def test_history_gives_last_change_and_first_add(make_repo) -> None:
    repo = make_repo(files={"a.md": "# A\n\none\n", "b.md": "# B\n"})
    first = repo.head()
    second = repo.commit({"a.md": "# A\n\ntwo\n"})
    repo.commit({"c.md": "# C\n"})
    with GitSource(repo.path) as src:
        head = src.resolve()
        hist = src.history(head, {"a.md", "b.md"})
        assert hist["a.md"].last_commit == second
        assert hist["a.md"].first_commit == first
        assert hist["b.md"].last_commit == first
        assert hist["a.md"].last_time == "2023-11-15T00:13:20+00:00"  # committer time, ISO 8601
        assert hist["a.md"].first_time == "2023-11-14T23:13:20+00:00"
        # restricted to the commits since `first`, b.md is untouched
        assert set(src.history(head, {"a.md", "b.md"}, since=first)) == {"a.md"}


def test_files_come_from_the_commit_not_the_working_tree(make_repo) -> None:
    repo = make_repo(files={"a.md": "committed\n"})
    (repo.path / "a.md").write_text("uncommitted edit\n")
    (repo.path / "untracked.md").write_text("never committed\n")
    with GitSource(repo.path) as src:
        entries = src.list_files(src.resolve())
        assert [e.path for e in entries] == ["a.md"]
        assert src.read_blob(entries[0].blob_sha) == b"committed\n"


def test_clear_errors_for_bad_repositories(tmp_path: Path, make_repo) -> None:
    with pytest.raises(SourceError, match=r"source 'x': repository path .*missing does not exist"):
        GitSource(tmp_path / "missing", "x")
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(SourceError, match="is not a git repository"):
        GitSource(plain, "x")
    empty = make_repo("empty")
    with GitSource(empty.path, "e") as src, pytest.raises(SourceError, match="has no commits yet"):
        src.resolve()
    repo = make_repo("r", files={"a.md": "x"})
    with GitSource(repo.path, "r") as src, pytest.raises(SourceError, match="ref 'nope' not found"):
        src.resolve("nope")
