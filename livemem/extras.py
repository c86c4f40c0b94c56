"""The optional stacks (``pyproject.toml``'s extras) and the one way code that needs one asks for it.

A text-only index needs none of them: ``geo`` (geopandas, pyproj, shapely: the GBIM export), ``documents``
(pypdfium2, python-docx, BeautifulSoup, lxml: PDF, DOCX, ODT and HTML sources) and ``postgres`` (psycopg and
dagster-postgres: the registry and attention tables, trace and personal-memory DSNs, Dagster's storage). ``make
install`` installs them all. Code that needs one imports it through ``require``, so a missing stack is a
``ConfigError`` that names what asked for it and the install command, never a bare ``ModuleNotFoundError``
(docs/install.md).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from livemem.errors import ConfigError

EXTRAS = {
    "geo": ("geopandas", "pyproj", "shapely"),
    "documents": ("pypdfium2", "docx", "bs4", "lxml"),
    "postgres": ("psycopg",),
}


def install_command(extra: str) -> str:
    return f"pip install 'living-memory[{extra}]'"


def require(extra: str, module: str, what: str) -> ModuleType:
    """``module`` (one of ``extra``'s), imported; ``ConfigError`` naming ``what`` needs it when it is not
    installed."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(
            f"{what} needs the {extra!r} extra ({module} is not installed): {install_command(extra)}"
        ) from exc
