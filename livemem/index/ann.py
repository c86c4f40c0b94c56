"""The approximate first stage for large segments: an HNSW graph per segment (usearch, int8), memory-mapped.

Exact search reads every row's int8 code per query (``livemem.index.scan``): 192 MB at 500k rows, the floor of its
latency. A segment with at least ``BuildSettings.ann_min_rows`` rows gets a graph when it is written
(``livemem.version.segments.write_segment``), saved beside its parts as ``ann.usearch`` and memory-mapped by every
serving worker (one copy in the page cache, as the serving copies). A query walks the graph for a few hundred
candidates instead of reading every row; **the candidates are scored exactly** (``DenseScan``), so a score is
always exact and only which rows are candidates is approximate. Chosen by measurement (``bench/ann.py``,
``bench/results/ann.md``, docs/approximate-search.md): usearch HNSW with int8 storage, connectivity 32,
``expansion_add`` 256 (16 / 128 until round 17: enough at 50k–1M rows, 0.972 dense recall@10 at 1.5M rows of
near-duplicate clusters, where 32 / 256 found 1.0 at the same breadth and walk time; its build costs ≈ 4× as long).

The graph's keys are the segment's rows (``_row``), every row of the segment: a version that holds fewer of them
(deletion vectors) drops the others after the search (``DenseScan`` asks for more when a filter or a deletion
keeps a fraction of the rows).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# simsimd is loaded before usearch, always: usearch's own SIMD library (numkong) exports the same symbols, and a
# simsimd loaded after it resolves them there and refuses int8 inputs (``cdist``: "matching datatypes").
import simsimd  # noqa: F401  (the dense first stage's kernel, livemem.index.kernels)

log = logging.getLogger(__name__)

GRAPH_FILE = "ann.usearch"
GRAPH_FORMAT = 1
# links per node and the breadth of the walk that places each row (bench/results/scale-1.5m.md, "graph links"):
# at 1.5M rows 16 / 128 gave dense recall@10 0.9735 at breadth 1,600, 32 / 256 gave 1.0 (walk 9.2 -> 8.1 ms)
CONNECTIVITY = 32
EXPANSION_ADD = 256
MIN_EXPANSION_SEARCH = 64  # usearch's default breadth; a search for more candidates walks at least that many


class GraphError(ValueError):
    """A graph file that cannot be used for its segment (missing, truncated, another shape)."""


def graph_meta(path: Path, rows: int, dim: int) -> dict[str, Any]:
    """What ``segment.json`` records of a segment's graph (``graph``): outside the segment's content hash, so the
    segment's id depends on its rows only (a graph is derived from them)."""
    with open(path, "rb") as fh:
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    return {"file": GRAPH_FILE, "format": GRAPH_FORMAT, "rows": rows, "dim": dim, "dtype": "i8", "metric": "ip",
            "connectivity": CONNECTIVITY, "expansion_add": EXPANSION_ADD, "size": path.stat().st_size,
            "sha256": digest}  # fmt: skip


def build_graph(vectors: np.ndarray, path: Path, threads: int = 0) -> dict[str, Any]:
    """Build the graph of a segment's ``vectors`` (row ``i`` is key ``i``), save it to ``path`` and return its
    ``graph_meta``. ``threads``: 0 uses every core (a build step, never a request)."""
    from usearch.index import Index

    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    rows, dim = vectors.shape
    index = Index(ndim=dim, metric="ip", dtype="i8", connectivity=CONNECTIVITY, expansion_add=EXPANSION_ADD)
    if rows:
        index.add(np.arange(rows, dtype=np.uint64), vectors, threads=threads)
    index.save(str(path))
    return graph_meta(path, rows, dim)


@dataclass(eq=False)
class Graph:
    """A segment's graph, memory-mapped: ``search(query, count)`` gives about the ``count`` segment rows of highest
    inner product with ``query``, best first.

    Walks of one graph run at once, each on a view of its own: usearch keeps the walk's breadth
    (``expansion_search``) in the index, and its Python ``search`` takes none, so one view walks for one query at a
    time. A view is opened when every other is walking (≈ 0.08 s and ≈ 20 MB of private memory for a 1M-row graph:
    the file's pages are the page cache's, one copy for every view and worker) and kept for the next."""

    rows: int
    path: Path
    _lock: threading.Lock
    _header: dict[str, Any] = field(default_factory=dict)
    _free: list[Any] = field(default_factory=list)  # views no walk is using
    views: int = 1

    @classmethod
    def open(cls, path: Path, meta: dict[str, Any]) -> Graph:
        """Map the graph at ``path`` after checking it against what ``segment.json`` recorded (``meta``): its size,
        format, and the rows and dimensions usearch's own header declares."""
        from usearch.index import Index

        try:
            size = path.stat().st_size
        except OSError as exc:
            raise GraphError(f"{path.name} is missing: {exc}") from None
        if meta.get("format") != GRAPH_FORMAT or size != meta.get("size"):
            raise GraphError(f"{path.name}: {size} bytes (format {meta.get('format')}), {meta.get('size')} recorded")
        header = Index.metadata(str(path))
        if (
            header is None
            or header.get("count_present") != meta.get("rows")
            or header.get("dimensions") != meta.get("dim")
        ):
            raise GraphError(f"{path.name}: its header does not declare {meta.get('rows')} rows of {meta.get('dim')}")
        index = _view(path, header)
        return cls(int(meta["rows"]), path, threading.Lock(), header, [index])

    def search(self, query: np.ndarray, count: int, breadth: int = 0) -> np.ndarray:
        """About the ``count`` rows nearest ``query`` (inner product), best first (fewer when the segment has
        fewer). ``breadth``: how many rows the walk keeps in view (usearch's ``expansion_search``), at least
        ``count``: a wider walk finds the nearest rows more surely (bench/results/scale-2m-notes.md)."""
        count = min(int(count), self.rows)
        if count <= 0:
            return np.zeros(0, dtype=np.int64)
        with self._lock:
            index = self._free.pop() if self._free else None
            if index is None:
                self.views += 1
        if index is None:  # every view is walking for another query: one more, kept for later
            index = _view(self.path, self._header)
        try:
            index.expansion_search = max(MIN_EXPANSION_SEARCH, count, int(breadth))
            found = index.search(query, count, threads=1)
        finally:
            with self._lock:
                self._free.append(index)
        return np.asarray(found.keys, dtype=np.int64)


def _view(path: Path, header: dict[str, Any]) -> Any:
    """A usearch view of the graph file, configured from its header, without a key → node table (the keys are the
    segment's rows, never looked up: ≈ 25 MB less private memory per 1M rows)."""
    from usearch.index import Index

    index = Index(
        ndim=header["dimensions"], metric=header["kind_metric"], dtype=header["kind_scalar"], enable_key_lookups=False
    )
    index.view(str(path))
    if len(index) != header.get("count_present"):
        raise GraphError(
            f"{path.name}: usearch mapped {len(index)} rows, its header declares {header.get('count_present')}"
        )
    return index


def open_recorded(path: Path, meta: dict[str, Any], what: str, verify: bool = False) -> Graph | None:
    """The graph at ``path`` mapped, or None when it does not match what its owner recorded (``meta``; ``verify``:
    its SHA-256 too): then said in the log and left unused — ``what`` (a segment, a GIS part) is searched exactly,
    slower, never wrong. The one way segments and the GIS part open their graphs."""
    try:
        if verify and path.is_file():
            with open(path, "rb") as fh:
                if hashlib.file_digest(fh, "sha256").hexdigest() != meta.get("sha256"):
                    raise GraphError(f"{path.name} does not match its recorded SHA-256")
        return Graph.open(path, meta)
    except (GraphError, OSError, RuntimeError, ValueError) as exc:
        log.warning("graph of %s not used (%s): searched exactly", what, exc)
        return None
