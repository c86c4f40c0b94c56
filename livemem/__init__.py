"""Living Memory core: the domain logic shared by the Dagster platform and the serving app, one package per step
of the data flow (it imports neither FastAPI nor Dagster: tests/unit/test_layers.py). A package imports only the
packages listed before it and the shared modules listed last (the ``layers`` contract in pyproject.toml, checked by
``lint-imports``).

- ``geo``       county names, ZIP data, places
- ``index``     the index's own data structures and formats: chunk records, dense int8 codes and the exact dense
  top-k, BM25 postings and scoring
- ``model``     the embedding model (torch or ONNX Runtime) and the embedding cache
- ``sources``   the sources file (YAML, JSON-Schema validated, chunking defaults), reading git objects at a commit,
  the breath file
- ``version``   the version format: segments, manifest, the index home (staging, atomic publish, retention), readers,
  the vector store (Chroma)
- ``query``     ranking one snapshot: filters, the search (the index's dense scan and BM25), fusion, the result cache, GIS entities
- ``usage``     usage traces and the nightly attention rollup
- ``ingest``    chunking, reading files, building a version (``build`` runs ``plan``, ``carry``, ``rechunk``,
  ``segments_writer``, ``chroma_mirror``, ``manifest``), its checks and its proof
- ``registry``, ``gbim``: the local_resources registry, the GBIM export
- ``personal``  each user's own memory beside the corpus: its log, snapshots, the view a request reads, consolidation
- ``answer``    a message → an auditable evidence set → an answer (context, graph, conversation, chat, web),
  and the shapes the front doors return (``results``)
- ``settings`` (every environment variable), ``errors``, ``dates``, ``duck``, ``schemas``: shared by every step
"""
