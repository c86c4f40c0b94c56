"""The shape the code keeps (issue 50): no import circle in the core, and no function longer than 60 lines but the
ones not yet split, a list that only shrinks.

- **Imports point one way**: in the graph of every import statement of ``livemem`` (grimp's, import-linter's graph
  library: deferred imports inside functions, ``if TYPE_CHECKING`` ones, a package's ``__init__`` importing its
  submodules and a submodule importing its package all count), no module reaches itself again.
- **Functions fit on a screen**: every function of ``livemem/``, ``serving/`` and ``orchestration/`` (nested ones
  too, each on its own and inside its parent) is at most ``MAX_LINES`` long, ``end_lineno - lineno + 1``, except
  those in ``LONGER_STILL``, each at most its recorded length.
"""

from __future__ import annotations

import ast
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("livemem", "serving", "orchestration")
MAX_LINES = 60

# The functions not yet split, keyed "path:qualified name" (methods as Class.method, nested functions as
# outer.inner), with their length in lines. This dict must only shrink (issue 50): a function split to MAX_LINES or
# fewer leaves it, a listed one may get shorter (then record its new length) but never longer, and none is added.
LONGER_STILL: dict[str, int] = {}  # empty since round 23: every function is within MAX_LINES


def _circles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """The strongly connected components of more than one module of ``package``'s direct-import graph (Tarjan's
    algorithm, iterative), each sorted, in the order found."""
    modules = sorted(m for m in graph.modules if m == package or m.startswith(package + "."))
    inside = set(modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & inside) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in modules:
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, at = work.pop()
            if at == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if at < len(edges[node]):
                work.append((node, at + 1))
                nxt = edges[node][at]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def _describe(graph: grimp.ImportGraph, circle: list[str]) -> str:
    """A circle's modules and the import lines joining them."""
    members = set(circle)
    lines = [" <-> ".join(circle)]
    for importer in circle:
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & members):
            for detail in graph.get_import_details(importer=importer, imported=imported):
                lines.append(f"    {importer}:{detail['line_number']}  {detail['line_contents']}")
    return "\n".join(lines)


def test_the_core_has_no_import_circle() -> None:
    graph = grimp.build_graph("livemem")
    circles = _circles(graph, "livemem")
    message = "\n".join(_describe(graph, c) for c in circles)
    if circles:
        print(message)
    assert not circles, f"import circles in livemem:\n{message}"


def _lengths(path: Path) -> dict[str, int]:
    """``"path:qualified name"`` → lines of every function of the file (the longest when two share a name)."""
    rel = path.relative_to(ROOT).as_posix()
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                assert child.end_lineno is not None
                key = f"{rel}:{name}"
                out[key] = max(out.get(key, 0), child.end_lineno - child.lineno + 1)
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return out


def test_functions_are_at_most_60_lines_but_the_listed_ones_which_only_shrink() -> None:
    lengths: dict[str, int] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            lengths.update(_lengths(path))
    too_long = {k: n for k, n in lengths.items() if n > MAX_LINES and k not in LONGER_STILL}
    grown = {k: (lengths[k], n) for k, n in LONGER_STILL.items() if k in lengths and lengths[k] > n}
    done = {k: lengths.get(k) for k in LONGER_STILL if lengths.get(k, 0) <= MAX_LINES}
    problems = [f"{k}: {n} lines (> {MAX_LINES}; split it)" for k, n in sorted(too_long.items())]
    problems += [f"{k}: {now} lines, longer than its recorded {was}" for k, (now, was) in sorted(grown.items())]
    problems += [
        f"{k}: {'gone' if n is None else f'{n} lines'}: remove it from LONGER_STILL" for k, n in sorted(done.items())
    ]
    assert not problems, "\n".join(problems)
