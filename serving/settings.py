"""The serving app's settings: the ``serving`` section of the settings tree (``livemem.settings.ServingSettings``),
read from the environment once by the app factory and the MCP server (``Settings.from_env()``).

==============================  =====================================================================
``RAG_INDEX_DIR``               index home (default ``rag_index/`` in the project)
``RAG_API_KEYS``                JSON object ``{"<api key>": "<role>"}``; requests without a key are ``public``
``RAG_ROLES``                   JSON object ``{"<role>": ["public", "internal"]}``: access levels per role
``RAG_TRACE_DIR``               where traces go (default ``<index home>/traces``)
``RAG_TRACE_DSN``               Postgres connection string: traces go to a table there instead of files
``RAG_TRACE_SECRET``            key signing trace ids (default: one generated once in ``<trace dir>/.trace-secret``)
``RAG_CACHE_SIZE``              result cache entries (0 turns the cache off; default 1024)
``RAG_RECENCY_HALF_LIFE_DAYS``  half-life of ``recency_bias`` (default 90)
``RAG_FUSION``                  hybrid fusion: ``linear`` (default), ``rrf``, ``minmax`` or ``zscore`` (``livemem/query/fusion.py``)
``RAG_RRF_K``                   reciprocal rank fusion constant (default 10; ``rrf`` only)
``RAG_REFRESH_INTERVAL_S``      how often ``CURRENT`` is re-read (default 0: before every request)
``RAG_TORCH_THREADS``           torch (or ONNX Runtime) and BLAS threads per serving process (default 1)
``LIVEMEM_ENCODER``             query encoder backend: ``onnx`` (default; faster) or ``torch`` (the reference; same vectors)
``LIVEMEM_QUERY_PRECISION``     query vectors on ``onnx``: ``int8`` (default; 2.2-2.4x faster, nDCG@10 -0.002) or ``fp32``
``LIVEMEM_INDEX_PRECISION``     the model id personal-memory vectors are filed under: ``int8-block`` (default) or ``fp32``
``RAG_MAX_BODY_BYTES``          largest request body accepted (default 1 MiB; bigger: 413, unread)
``RAG_BODY_TIMEOUT_S``          seconds a request body may take to arrive whole (default 10; slower: 408, closed)
``RAG_SPARQL_WORKERS``          SPARQL worker processes per serving process: queries at once (default 2)
``RAG_SPARQL_TIMEOUT_S``        wall-clock limit of one SPARQL query; its worker is killed after it (default 2)
``RAG_SPARQL_MEMORY_MB``        memory one SPARQL query may use in its worker (default 256)
``RAG_CORS_ORIGINS``            origins whose pages may call ``/facts`` and ``/gbim/`` (comma-separated, or ``*``; default none)
``RAG_RDF_BASE_IRI``            base of served RDF names (default ``https://living-memory.example.org/``; docs/sparql.md)
==============================  =====================================================================

The whole tree, with every other section: ``livemem/settings.py`` and docs/settings.md.
"""

from __future__ import annotations

from livemem.settings import ACCESS_LEVELS, ServingSettings

Settings = ServingSettings

__all__ = ["ACCESS_LEVELS", "Settings"]
