"""The services behind every front door: each does a whole request (access, cache, search, normalisation,
documents, suggestions, traces) so that the HTTP routes, the MCP tools and ``livemem query`` only validate their
arguments, call one, and map its ``ServiceError`` (``errors.py``). One of each lives on the process's
``ServingState`` (``state.query``, ``state.gis``, ``state.facts``, ``state.chunks``, ``state.feedback``,
``state.context_service``).

- ``query.py``     ``QueryService``: POST /query, MCP ``query``, ``livemem query``
- ``gis.py``       ``GisService``: POST /gis/query, GET /entities/{id}, MCP ``gis_query``
- ``facts.py``     ``FactsService``: GET /facts, MCP ``facts``
- ``chunks.py``    ``ChunkService``: GET /chunks/{id}, MCP ``verify_chunk`` and ``livemem://chunks/{id}``
- ``feedback.py``  ``FeedbackService``: POST /feedback, MCP ``feedback``
- ``context.py``   ``ContextService``: /context, /chat, /v1/chat/completions, MCP ``context`` and ``chat``
- ``versions.py``  the version a request answers from; ``memory.py``: what answers take from personal memory

No module here imports a router.
"""
