"""Settings are read once, by the entry points (the HTTP app, the MCP server, the CLI, the Dagster code location), and
passed down: the core (``livemem``) reads no variable itself. Reading the environment deep in the core made a
module's behaviour depend on where it ran (a worker, a test, a bench script) and hid what a function depends on.

Every ``from_env`` in ``livemem/`` outside ``livemem/settings.py`` is a failure here, as is making a settings section
by calling it (pydantic-settings would read the environment then), except the sites listed in ``REMAINING``: each is
the next one to pass down, with why it is still there. Removing one makes this test fail until it is struck off.
"""

from __future__ import annotations

import ast
import fnmatch
import inspect
from pathlib import Path

import livemem.settings
from livemem.settings import Section

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "livemem"
SECTIONS = {
    name for name, value in vars(livemem.settings).items() if inspect.isclass(value) and issubclass(value, Section)
}

# (module, enclosing function or <module>, what it calls or defines) of the core sites still reading the environment:
# none now. A site that cannot be passed down yet is listed here, with why, until it is.
REMAINING: set[tuple[str, str, str]] = set()


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    return "?"


def reading_sites(core: Path = CORE, root: Path = ROOT) -> set[tuple[str, str, str]]:
    """(module, enclosing function, callee or "def") of every environment read and every ``*from_env`` function
    in the core, outside the settings module."""
    found: set[tuple[str, str, str]] = set()
    for path in sorted(core.rglob("*.py")):
        if path == core / "settings.py":
            continue
        module = str(path.relative_to(root))

        def visit(node: ast.AST, scope: str, module: str = module) -> None:
            for child in ast.iter_child_nodes(node):
                inner = scope
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    inner = child.name
                    if child.name.endswith("from_env"):
                        found.add((module, inner, "def"))
                if isinstance(child, ast.Call):
                    callee = _name(child.func)
                    if callee.endswith("from_env") or callee in SECTIONS:
                        found.add((module, scope, callee))
                visit(child, inner)

        visit(ast.parse(path.read_text(encoding="utf-8")), "<module>")
    return found


def _matches(site: tuple[str, str, str], rule: tuple[str, str, str]) -> bool:
    return all(fnmatch.fnmatch(part, pattern) for part, pattern in zip(site, rule, strict=True))


def test_the_core_reads_no_setting_itself_outside_the_remaining_sites() -> None:
    sites = reading_sites()
    unexpected = sorted(s for s in sites if not any(_matches(s, rule) for rule in REMAINING))
    assert unexpected == [], "pass the section down from the entry point instead"
    gone = sorted(rule for rule in REMAINING if not any(_matches(s, rule) for s in sites))
    assert gone == [], "these sites are passed down now: strike them off REMAINING"


def test_the_check_sees_every_kind_of_read(tmp_path: Path) -> None:
    """A ``from_env`` call, a ``*_from_env`` helper and a section made by calling it (pydantic-settings reads the
    environment then) are each found, with the function they are in; the settings module itself is not read."""
    core = tmp_path / "livemem"
    core.mkdir()
    (core / "settings.py").write_text("X = BuildSettings.from_env()\n", encoding="utf-8")
    (core / "step.py").write_text(
        "LIMIT = RegistrySettings.from_env().max_rows\n"
        "def workers_from_env():\n    return 1\n"
        "class Step:\n    def run(self):\n        return ServingSettings(), ServingSettings.defaults()\n",
        encoding="utf-8",
    )
    assert reading_sites(core, tmp_path) == {
        ("livemem/step.py", "<module>", "RegistrySettings.from_env"),
        ("livemem/step.py", "workers_from_env", "def"),
        ("livemem/step.py", "run", "ServingSettings"),
    }
