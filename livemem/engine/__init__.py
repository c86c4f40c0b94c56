"""The read side: assembles a ``Snapshot`` from a published version, holds the serving copies and the open versions,
built from one ``EngineConfig`` (``livemem.settings``).

``livemem.version`` is the index format (store, segments, schema, manifest, history); this package reads it for
queries: ``snapshot`` loads one version (its segments, each loaded by ``segments`` from its serving copy,
``livemem.version.mapped``, and kept in the process's segment cache ``snapshot.SEGMENTS``) into the scorers of
``livemem.index`` (``DenseRows``, ``SparseScorer``), and ``versions`` holds the versions a process serves
(``IndexReader``: ``CURRENT``, followed between requests; ``OpenVersions``: older ones requests name). Every version is loaded under the engine config of
its home (``IndexHome.engine``) or the one the caller gives (``load_snapshot_at(engine=)``).
"""
