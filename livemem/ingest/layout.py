"""The chunk step's part of a version: its tables (``livemem.version.schema`` declares them: the membership of
``livemem.version.segments`` and what else the step writes) and views; the segments hold the chunk rows. Creating
them empty is the staging contract's (``livemem.version.staging.init_chunk_tables``)."""

from __future__ import annotations

from livemem.version.schema import CHUNKS, owned_by

CHUNK_TABLES = owned_by(CHUNKS)  # tables and views: a build writes them, and copies every other step's tables
SKIP_COLUMNS = ("source", "path", "blob_sha", "size", "reason")
