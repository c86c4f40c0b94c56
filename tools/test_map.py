"""Which test files exercise each module of livemem/, serving/ and orchestration/, read from the tests' imports.

    .venv/bin/python tools/test_map.py           # print the table (markdown)
    .venv/bin/python tools/test_map.py --write   # rewrite it in tests/README.md, between the test-map markers

A test file exercises a module when it imports it, directly or through a ``tests/support`` helper it imports, or
asks for a fixture of ``tests/conftest.py`` that imports it (``embedder``: ``livemem.model.embedding``). A name
imported from a package (``from livemem.gbim import export_gbim``) counts for the package and for the module its
``__init__`` takes the name from. Nothing is imported: the files are parsed (``ast``). A module that no test
imports is listed with the nearest modules that import it and have tests ("tested through ...").
Tests that reach a module only by a subprocess (the ``livemem`` command, ``python -m``) are not seen.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("livemem", "serving", "orchestration")
TESTS = ROOT / "tests"
README = TESTS / "README.md"
LAYERS = ("unit", "pipelines", "api", "integration")
START, END = "<!-- test-map:start -->", "<!-- test-map:end -->"


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules() -> dict[str, Path]:
    """Every module of the three packages (a package by its ``__init__``), name → file."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                found[module_name(path)] = path
    return found


def _parse(path: Path) -> ast.AST:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _imports(tree: ast.AST, this: str = "") -> list[tuple[str, str | None]]:
    """(module, name) for each import in ``tree``: ``name`` is what ``from module import name`` takes, else None.
    Relative imports are resolved against ``this`` (the importing module, a package by its own name)."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = this.split(".")[: len(this.split(".")) - node.level + 1] if this else []
                base = ".".join([*anchor, *([base] if base else [])])
            found += [(base, alias.name) for alias in node.names]
    return found


class Resolver:
    """Turns an import into the project modules it reaches (through a package's re-exports)."""

    def __init__(self, modules: dict[str, Path]) -> None:
        self.modules = modules
        self._reexports: dict[str, dict[str, str]] = {}

    def reexports(self, package: str) -> dict[str, str]:
        """name → the module a package's ``__init__`` imports it from."""
        if package not in self._reexports:
            names: dict[str, str] = {}
            path = self.modules[package]
            if path.name == "__init__.py":
                for module, name in _imports(_parse(path), package):
                    if name and module in self.modules:
                        names[name] = module
            self._reexports[package] = names
        return self._reexports[package]

    def resolve(self, module: str, name: str | None) -> set[str]:
        if name is not None and f"{module}.{name}" in self.modules:
            return {f"{module}.{name}"}
        if module not in self.modules:
            return set()
        reached, seen = {module}, set()
        while name is not None and module not in seen and name in self.reexports(module):
            seen.add(module)
            module = self.reexports(module)[name]
            reached.add(module)
            if f"{module}.{name}" in self.modules:
                reached.add(f"{module}.{name}")
                break
        return reached

    def of(self, tree: ast.AST, this: str = "") -> set[str]:
        reached: set[str] = set()
        for module, name in _imports(tree, this):
            reached |= self.resolve(module, name)
        return reached


def _support_imports(tree: ast.AST) -> set[str]:
    return {
        (f"{module}.{name}" if module == "support" else module)
        for module, name in _imports(tree)
        if module == "support" or module.startswith("support.")
    }


def _fixture_modules(resolver: Resolver) -> dict[str, set[str]]:
    """conftest fixture name → the project modules its body imports."""
    found: dict[str, set[str]] = {}
    for node in ast.walk(_parse(TESTS / "conftest.py")):
        if isinstance(node, ast.FunctionDef):
            reached = resolver.of(node)
            if reached:
                found[node.name] = reached
    return found


def _arguments(tree: ast.AST) -> set[str]:
    return {
        arg.arg
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for arg in node.args.args
    }


def test_files() -> list[Path]:
    return sorted(p for layer in LAYERS for p in (TESTS / layer).rglob("test_*.py"))


class TestMap:
    """For each module: the test files importing it, the support helpers and conftest fixtures that import it for
    the tests using them (with how many test files use each), and the modules importing it (``through``)."""

    def __init__(self) -> None:
        self.modules = source_modules()
        resolver = Resolver(self.modules)
        self.direct: dict[str, set[str]] = defaultdict(set)
        self.helpers: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        support: dict[str, tuple[set[str], set[str]]] = {}  # support module -> (project modules, support modules)
        for path in sorted((TESTS / "support").glob("*.py")):
            tree = _parse(path)
            support[module_name(path, TESTS)] = (resolver.of(tree), _support_imports(tree))
        fixtures = _fixture_modules(resolver)
        for path in test_files():
            tree = _parse(path)
            name = path.relative_to(TESTS).with_suffix("").as_posix()
            for module in resolver.of(tree):
                self.direct[module].add(name)
            pending, seen = list(_support_imports(tree)), set()
            while pending:  # the support helpers it imports, and theirs
                helper = pending.pop()
                if helper in seen or helper not in support:
                    continue
                seen.add(helper)
                for module in support[helper][0]:
                    self.helpers[module][f"`{helper}`"].add(name)
                pending += support[helper][1]
            for fixture in _arguments(tree) & fixtures.keys():
                for module in fixtures[fixture]:
                    self.helpers[module][f"fixture `{fixture}`"].add(name)
        self.importers: dict[str, set[str]] = defaultdict(set)
        for name, path in self.modules.items():
            package = name if path.name == "__init__.py" else name.rpartition(".")[0]
            for module in resolver.of(_parse(path), package):
                if module != name:
                    self.importers[module].add(name)

    def tested(self, module: str) -> bool:
        return bool(self.direct.get(module) or self.helpers.get(module))

    def through(self, module: str) -> list[str]:
        """The nearest modules importing ``module`` that have tests (breadth first)."""
        frontier, seen, found = sorted(self.importers.get(module, ())), {module}, []
        while frontier and not found:
            found = [m for m in frontier if self.tested(m)]
            seen |= set(frontier)
            frontier = sorted({i for m in frontier for i in self.importers.get(m, ()) if i not in seen})
        return found

    def cell(self, module: str) -> str:
        parts = [", ".join(f"`{t}`" for t in sorted(self.direct.get(module, ())))] if self.direct.get(module) else []
        helpers = self.helpers.get(module, {})
        extra = {h: tests - self.direct.get(module, set()) for h, tests in helpers.items()}
        uses = [f"{h} ({len(t)} more)" for h, t in sorted(extra.items()) if t]
        if uses:
            parts.append("via " + ", ".join(uses))
        if parts:
            return "; ".join(parts)
        if self.modules[module].name == "__init__.py":
            return "(package: its modules are listed below)"
        via = self.through(module)
        return "no test imports it" + (f"; tested through {', '.join(f'`{m}`' for m in via[:4])}" if via else "")


def table() -> str:
    """The markdown table, one per package: module | the test files exercising it."""
    tests = TestMap()
    lines = []
    for package in PACKAGES:
        lines += ["", f"### `{package}/`", "", "| module | test files |", "| --- | --- |"]
        for module in (m for m in tests.modules if m == package or m.startswith(package + ".")):
            lines.append(f"| `{module}` | {tests.cell(module)} |")
    return "\n".join(lines[1:]) + "\n"


def write(readme: Path = README) -> None:
    text = readme.read_text(encoding="utf-8")
    head, start, rest = text.partition(START)
    _, end, tail = rest.partition(END)
    if not start or not end:
        sys.exit(f"{readme}: no {START} ... {END} section to rewrite")
    readme.write_text(f"{head}{START}\n{table()}{END}{tail}", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite the table in {README.relative_to(ROOT)}")
    if parser.parse_args().write:
        write()
    else:
        sys.stdout.write(table())


if __name__ == "__main__":
    main()
