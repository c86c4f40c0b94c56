"""``chromadb`` is the optional ``chroma`` extra (``pip install 'living-memory[chroma]'``): the project's own
dependencies provide every third-party module the product imports without it (nothing may arrive only through
chromadb, as pydantic-settings did), and the product imports chromadb only inside the functions that mirror vectors."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("livemem", "orchestration", "serving")
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_closure(requirements: list[str]) -> set[str]:
    """The distributions these requirements pull in, as installed here (markers and extras honoured)."""
    found: set[str] = set()
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(Requirement(r), frozenset({""})) for r in requirements]
    while todo:
        req, extras = todo.pop()
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in extras):
            continue
        key = (_key(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        found.add(key[0])
        try:
            requires = md.distribution(req.name).requires or []
        except md.PackageNotFoundError:
            continue
        todo += [(Requirement(r), frozenset({"", *req.extras})) for r in requires]
    return found


def product_imports() -> dict[str, list[str]]:
    """Top-level third-party module -> where the product imports it (``file:line``, ``(function)`` when lazy)."""
    own = {*PRODUCT, *sys.stdlib_module_names, "__future__"}
    where: dict[str, list[str]] = {}
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            lazy = {
                id(node)
                for fn in ast.walk(tree)
                if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
                for node in ast.walk(fn)
            }
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in own:
                        mark = " (function)" if id(node) in lazy else ""
                        where.setdefault(top, []).append(f"{path.relative_to(ROOT)}:{node.lineno}{mark}")
    return where


def test_chromadb_is_the_chroma_extra_not_a_dependency() -> None:
    assert "chromadb" not in {_key(Requirement(r).name) for r in PROJECT["dependencies"]}
    assert [Requirement(r).name for r in PROJECT["optional-dependencies"]["chroma"]] == ["chromadb"]


OPTIONAL = ("chroma", "geo", "documents", "postgres")  # pyproject.toml's extras of the product (docs/install.md)


def test_the_dependencies_alone_provide_every_module_the_product_imports() -> None:
    """Every third-party module the product imports comes with the dependencies, or with one of the optional
    extras and then only inside the functions that need it (a text-only index never imports it)."""
    base = installed_closure(PROJECT["dependencies"])
    assert "chromadb" not in base
    extras = {name: installed_closure(PROJECT["optional-dependencies"][name]) - base for name in OPTIONAL}
    providers = md.packages_distributions()
    missing, eager = {}, {}
    for module, places in product_imports().items():
        dists = {_key(d) for d in providers.get(module, [])}
        if dists & base:
            continue
        if any(dists & extra for extra in extras.values()):
            if not all(p.endswith("(function)") for p in places):
                eager[module] = places
            continue
        missing[module] = places
    assert missing == {}, "declare these in pyproject.toml's dependencies or an extra"
    assert eager == {}, "an optional extra's module is imported only inside the functions that need it"
    for module in ("geopandas", "pyproj", "shapely", "pypdfium2", "docx", "bs4", "psycopg"):
        assert not {_key(d) for d in providers.get(module, [])} & base, f"{module} is an extra's, not a dependency"


def test_chromadb_is_imported_only_where_vectors_are_mirrored_and_only_when_called() -> None:
    places = product_imports()["chromadb"]
    assert places and all(p.endswith("(function)") for p in places), places
    assert {p.split(":")[0] for p in places} <= {"livemem/version/vectors.py", "livemem/version/store.py"}
