"""Every benchmark result the documentation or a code comment names is in ``bench/results/``: one current result
per benchmark, superseded ones listed in ``bench/results/HISTORY.md`` (and kept in git history), so a reader who
follows a number to its result finds the file."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
# bench/results/x.md, results/x.json, results/x.{json,md}; not an output path in a command (--output ...), not a
# pattern such as answers-<tag>
REFERENCE = re.compile(r"(?<!--output )(?<![\w/-])(?:bench/)?results/([A-Za-z0-9_.-]+?)\.(md|json|\{json,md\})")


def referenced() -> list[tuple[str, str]]:
    files = [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for package in ("livemem", "serving", "orchestration"):  # bench/ names the files its runs write
        files += sorted((ROOT / package).rglob("*.py"))
    found = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        for match in REFERENCE.finditer(text):
            name, ext = match.groups()
            for suffix in ("json", "md") if ext == "{json,md}" else (ext,):
                found.append((str(path.relative_to(ROOT)), f"{name}.{suffix}"))
    return found


def test_every_named_result_file_exists() -> None:
    named = referenced()
    assert len(named) > 20  # the pattern still finds the references
    missing = sorted({(where, name) for where, name in named if not (RESULTS / name).is_file()})
    assert missing == [], "point these at the current result, or at bench/results/HISTORY.md"


def test_one_current_result_per_benchmark() -> None:
    """No round-suffixed copies beside the current result: earlier runs are rows of HISTORY.md."""
    rounds = sorted(p.name for p in RESULTS.iterdir() if re.search(r"-(r|h)\d+([-.]|$)", p.stem + "."))
    assert rounds == []
    history = (RESULTS / "HISTORY.md").read_text(encoding="utf-8")
    for name in ("serving_quality-r13.md", "scale-r9.md", "encoder-r5.md", "serving_latency-r12.md"):
        assert f"`{name}`" in history  # superseded results are listed with their date, commit and numbers
