"""JSON Schemas from the project's ``schemas/`` directory, compiled once per process."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"


@cache
def load_schema(name: str) -> dict[str, Any]:
    """Return the schema ``schemas/<name>.schema.json`` as a dict."""
    return json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text(encoding="utf-8"))


@cache
def validator(name: str) -> Draft202012Validator:
    """A validator for ``schemas/<name>.schema.json`` that also checks formats (uuid, date-time)."""
    schema = load_schema(name)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=FormatChecker())


def json_path(parts: Any) -> str:
    """Render a jsonschema error path like ``sources[0].collection``."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def errors_for(name: str, instance: Any) -> list[str]:
    """All schema violations of ``instance``, each as ``path: message``."""
    return [
        f"{json_path(err.absolute_path)}: {err.message}"
        for err in sorted(validator(name).iter_errors(instance), key=lambda e: list(map(str, e.absolute_path)))
    ]
