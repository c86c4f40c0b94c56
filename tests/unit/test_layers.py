"""The layers point one way: the core (``livemem``) imports neither the entry points (``serving``,
``orchestration``) nor their frameworks (FastAPI, Starlette, Dagster), so it can be used, tested and reasoned
about without them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("fastapi", "starlette", "dagster", "serving", "orchestration")

# Imports every core module in turn and names, for each forbidden package that appears, the module that pulled it in.
IMPORT_ALL = """
import importlib, json, pkgutil, sys
import livemem
forbidden = %r
first = {}
for info in pkgutil.walk_packages(livemem.__path__, "livemem."):
    importlib.import_module(info.name)
    for name in forbidden:
        if name in sys.modules and name not in first:
            first[name] = info.name
print(json.dumps(first))
"""


def test_importing_every_core_module_loads_no_entry_point_or_framework() -> None:
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL % (FORBIDDEN,)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {}


def test_no_core_module_imports_them_anywhere_not_even_inside_a_function(monkeypatch) -> None:
    # import-linter reads every import statement (also those inside functions, which a run never reaches).
    monkeypatch.chdir(ROOT)
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml")) == 0


def test_every_request_and_response_body_lives_in_serving_models() -> None:
    """The routers and the MCP server define no body of their own: they import them from ``serving.models``."""
    import importlib
    import inspect
    import pkgutil

    from pydantic import BaseModel

    import serving.routers

    modules = [
        importlib.import_module(i.name) for i in pkgutil.walk_packages(serving.routers.__path__, "serving.routers.")
    ]
    modules.append(importlib.import_module("serving.mcp"))
    defined = [
        f"{module.__name__}.{name}"
        for module in modules
        for name, value in vars(module).items()
        if inspect.isclass(value) and issubclass(value, BaseModel) and value.__module__ == module.__name__
    ]
    assert defined == []
