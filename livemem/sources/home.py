"""The deployment's home from the sources file (docs/home.md): the ``home:`` section (``schemas/home_config``),
else the registry section's ``states`` / ``state``, else West Virginia (``livemem.geo.home.WEST_VIRGINIA``), so a
sources file that names no home answers exactly as before."""

from __future__ import annotations

from livemem.geo.home import DEFAULT_NAME, WEST_VIRGINIA, Home
from livemem.sources.config import SourcesConfig


def home_from_sources(config: SourcesConfig) -> Home:
    """The home a sources file names (see the module); every mistake in its ``home:`` section is reported with
    its file, line and column (``SourcesConfig.section``)."""
    raw = config.section("home", "home_config")
    if raw is not None:
        states = raw.get("states") or ([raw["state"]] if raw.get("state") else [])
        if not states:
            states = _registry_states(config) or list(WEST_VIRGINIA.states)
        lines = tuple((c["name"], c["phone"]) for c in raw.get("crisis_lines") or [])
        return Home(tuple(states), raw.get("name") or DEFAULT_NAME, lines)
    states = _registry_states(config)
    return Home(tuple(states)) if states else WEST_VIRGINIA


def _registry_states(config: SourcesConfig) -> list[str]:
    """The states the registry section names (``states: [..]`` or ``state:``; its own schema checks it)."""
    raw = getattr(config, "_raw", {}).get("registry")
    if not isinstance(raw, dict):
        return []
    first = [str(raw["state"])] if raw.get("state") else []  # the primary, when named beside states
    states = raw.get("states")
    if isinstance(states, list) and states:
        return list(dict.fromkeys([*first, *(str(s) for s in states)]))
    return first
