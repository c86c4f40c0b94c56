"""The persistent answer cache holds answers with internal text: its files are the service user's only."""

from __future__ import annotations

import stat
from pathlib import Path

from livemem.answer.answer_cache import AnswerCache


def modes(folder: Path) -> dict[str, int]:
    return {f.name: stat.S_IMODE(f.stat().st_mode) for f in folder.iterdir()}


def test_the_persistent_cache_is_private_to_the_service_user(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    cache = AnswerCache(path=folder / "answers.sqlite")
    cache.put("k", {"answer": "the zebra protocol (internal playbook)"})
    assert cache.get("k", "context") == {"answer": "the zebra protocol (internal playbook)"}
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    files = modes(folder)
    assert {"answers.sqlite", "answers.sqlite-wal", "answers.sqlite-shm"} <= set(files)  # WAL mode: three files
    assert set(files.values()) == {0o600}, files  # were 0644: any local user could read internal answers


def test_an_older_readable_cache_is_made_private_when_opened(tmp_path: Path) -> None:
    folder = tmp_path / "cache"  # the index home's cache/, shared with other files
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    path = folder / "answers.sqlite"
    first = AnswerCache(path=path)
    first.put("k", {"answer": "internal"})
    for name in ("answers.sqlite", "answers.sqlite-wal", "answers.sqlite-shm"):
        (folder / name).chmod(0o644)  # as the cache of an earlier release left them
    second = AnswerCache(path=path)
    assert second.get("k", "context") == {"answer": "internal"}  # the entries are kept
    assert set(modes(folder).values()) == {0o600}, modes(folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755  # a folder it did not create is left as it is
