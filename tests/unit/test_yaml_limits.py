"""Hostile YAML (``livemem.yamlio``): duplicate keys, alias bombs, oversize and over-deep documents are clear errors
naming file, line and column, never a silently wrong value, a MemoryError or a RecursionError."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from livemem import yamlio
from livemem.dates import document_date
from livemem.errors import ConfigError
from livemem.sources.config import load_sources

PROJECT = Path(__file__).resolve().parents[2]


def sources(tmp_path: Path, body: str) -> Path:
    (tmp_path / "repo").mkdir(exist_ok=True)
    path = tmp_path / "sources.yaml"
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def test_a_key_given_twice_is_refused_at_its_line_and_column(tmp_path: Path) -> None:
    # read last-wins, this source would be published to the public role
    twice = sources(
        tmp_path,
        """\
        sources:
          - name: handbook
            repo: repo
            collection: handbook
            access: internal
            access: public
        """,
    )
    with pytest.raises(ConfigError) as err:
        load_sources(twice)
    assert f"{twice}:6:5: not valid YAML: found duplicate key 'access' (first given at line 5, column 5)" in str(
        err.value
    )

    nested = sources(
        tmp_path, "index:\n  max_file_bytes: 2000\n  retention: 3\n  max_file_bytes: 9000000\nsources: []\n"
    )
    with pytest.raises(ConfigError, match=r"sources\.yaml:4:3: not valid YAML: found duplicate key 'max_file_bytes'"):
        load_sources(nested)

    # a section another step owns (registry, spatial) is part of the same file: refused the same way
    section = sources(
        tmp_path,
        "sources:\n  - {name: a, repo: repo, collection: abc}\nregistry:\n  csv: a.csv\n  csv: b.csv\n",
    )
    with pytest.raises(ConfigError, match=r"sources\.yaml:5:3: not valid YAML: found duplicate key 'csv'"):
        load_sources(section)


def test_merge_keys_may_still_be_overridden() -> None:
    data = yamlio.load("base: &b {access: internal, ref: main}\nsrc: {<<: *b, access: public}\n")
    assert data["src"] == {"access": "public", "ref": "main"}


def test_an_alias_bomb_is_refused_at_once_in_bounded_memory(tmp_path: Path) -> None:
    """Nine levels of nine aliases: 387 million strings once expanded (the schema validation walked them all until
    MemoryError). Loaded in a child process with a 1 GiB address-space limit and a 60 s timeout."""
    lines = ['lol: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    bomb = sources(tmp_path, "\n".join(lines) + "\nsources: *l8\n")
    child = textwrap.dedent(
        f"""\
        import resource, time
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from livemem.errors import ConfigError
        from livemem.sources.config import load_sources
        start = time.perf_counter()
        try:
            load_sources({str(bomb)!r})
        except ConfigError as exc:
            print(f"{{time.perf_counter() - start:.3f}}", exc)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", child], cwd=PROJECT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seconds, message = done.stdout.split(" ", 1)
    assert float(seconds) < 1.0
    assert f"{bomb}:6:5:" in message and "refused: the document grows past 200000 nodes when its aliases" in message


def test_oversize_deep_and_self_referring_documents_are_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("sources: []\n" + "# padding\n" * 300_000, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"big\.yaml: refused: the sources file is 3000012 bytes, over the 2097152"):
        load_sources(big)

    deep = sources(tmp_path, "sources: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match=r"sources\.yaml:1:109: refused: collections nested deeper than 100 levels"):
        load_sources(deep)  # was RecursionError

    loop = sources(tmp_path, "sources: &s [*s]\n")
    with pytest.raises(ConfigError, match=r"sources\.yaml:1:10: refused: an alias refers to a collection that holds"):
        load_sources(loop)

    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes("sources: []\n# caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1\.yaml: not UTF-8 \(byte 17\)"):
        load_sources(latin1)


def test_hostile_front_matter_never_stops_a_build() -> None:
    """A document's front matter is data the build reads too: a bomb or a 5000-deep list is no date, not a crash;
    front matter with a repeated key keeps its meaning (the last value), as chunks built before had it."""
    start = time.perf_counter()
    deep = "---\ntags: " + "[" * 5000 + "]" * 5000 + "\n---\n# Report of March 2021\n"
    assert document_date("notes.md", deep)["date_source"] == "heading"  # was RecursionError
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    bomb = "---\n" + "\n".join(levels) + "\ndate: 2021-04-05\n---\n# Notes\n"
    assert document_date("notes.md", bomb) is None
    assert time.perf_counter() - start < 2.0
    repeated = "---\ndate: 2020-01-01\ndate: 2021-06-07\n---\n# Notes\n"
    assert document_date("notes.md", repeated) == {
        "document_date": "2021-06-07", "date_source": "front_matter", "date_precision": "day",
    }  # fmt: skip


def test_an_answer_suite_with_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    from livemem.answer.evaluation import load_suite

    suite = tmp_path / "suite.yaml"
    suite.write_text("cases:\n  - id: a\n    question: Where is WIC?\n    question: Where is SNAP?\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"suite\.yaml:4:5: not valid YAML: found duplicate key 'question'"):
        load_suite(suite)
