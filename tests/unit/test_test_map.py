"""tests/README.md maps every module to its tests: a module added without regenerating the map fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "tests" / "README.md"
START, END = "<!-- test-map:start -->", "<!-- test-map:end -->"
REGENERATE = ".venv/bin/python tools/test_map.py --write"


def modules(package: str) -> set[str]:
    found = set()
    for path in (ROOT / package).rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found.add(".".join(parts))
    return found


def listed() -> set[str]:
    text = README.read_text(encoding="utf-8")
    assert START in text and END in text, f"tests/README.md lost its map markers; restore them and run {REGENERATE}"
    section = text.split(START, 1)[1].split(END, 1)[0]
    return set(re.findall(r"^\| `([\w.]+)` \|", section, flags=re.MULTILINE))


def test_every_module_is_in_the_test_map() -> None:
    expected = modules("livemem") | modules("serving") | modules("orchestration")
    assert any(m.startswith("livemem.") for m in expected)
    missing = sorted(expected - listed())
    assert not missing, f"not in tests/README.md's test map: {', '.join(missing)}; regenerate it: {REGENERATE}"


def test_the_map_lists_no_module_that_is_gone() -> None:
    expected = modules("livemem") | modules("serving") | modules("orchestration")
    gone = sorted(listed() - expected)
    assert not gone, f"tests/README.md's test map lists modules that no longer exist: {', '.join(gone)}; {REGENERATE}"
