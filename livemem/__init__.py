"""Living Memory core: the domain logic shared by the Dagster platform and the serving app, one package per step
of the data flow (it imports neither FastAPI nor Dagster: tests/unit/test_layers.py).

- ``sources``   the sources file (YAML, JSON-Schema validated) and reading git objects at a commit
- ``ingest``    chunking, chunk records, embedding and its cache, building a version (``build`` runs ``plan``,
  ``carry``, ``rechunk``, ``segments_writer``, ``chroma_mirror``, ``manifest``), its checks and its proof
- ``version``   the version format: segments, manifest, the index home (staging, atomic publish, retention), readers
- ``query``     ranking one snapshot: filters, the dense scan, BM25, fusion, the result cache, GIS entities
- ``answer``    a message → an auditable evidence set → an answer (context, graph, conversation, chat, web, personal),
  and the shapes the front doors return (``results``)
- ``usage``     usage traces and the nightly attention rollup
- ``registry``, ``gbim``, ``geo``: the local_resources registry, the GBIM export, places and county names
- ``settings`` (every environment variable), ``errors``, ``dates``, ``duck``, ``schemas``: shared by every step
"""
