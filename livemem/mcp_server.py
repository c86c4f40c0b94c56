"""``python -m livemem.mcp_server``: the command the MCP clients already configured run. The server is
``serving/mcp.py`` (an entry point over the serving state, like the HTTP app); it is imported only when this
module runs as a program, so importing the core never imports the serving layer."""

from __future__ import annotations

if __name__ == "__main__":
    from serving.mcp import main

    main()
