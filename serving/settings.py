"""``Settings``: the serving section of the settings tree (``livemem.settings.ServingSettings``), under the name the
app, the MCP server and the tests import. Its variables: ``livemem/settings.py`` and docs/settings.md."""

from livemem.settings import ServingSettings as Settings

__all__ = ["Settings"]
