"""Read-only SPARQL over the GBIM facts, run in worker processes that can be stopped.

A regular expression with catastrophic backtracking holds Python's interpreter lock, and a thread cannot be
ended from outside: a query run in a thread of the serving process could freeze it for good. So every query
runs in a separate process of a small ``SparqlPool``. The serving thread only waits on a pipe; when a query
overruns its wall-clock limit the worker is killed (SIGKILL) and a fresh one replaces it. Each worker also
runs under an address-space budget per query and a CPU-time backstop (so even a worker orphaned by a killed
server ends), cuts results at a row and character limit while iterating (rdflib yields SELECT rows lazily,
so stopping early ends the work), and has no network: rdflib's graph loading is off and sockets refuse to
connect.

Queries are checked on their parsed algebra, not their text: SELECT, ASK, CONSTRUCT and DESCRIBE only (no
update), and no ``SERVICE`` (request forgery), ``FROM`` / ``FROM NAMED`` (remote loading) or ``GRAPH`` (the facts
are one default graph). The worker also writes the answer in the media type the caller negotiated
(``ResultFormats``), so a large result is never rebuilt in the serving process.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from livemem.gbim.config import GBIM_IRI

log = logging.getLogger(__name__)

PREFIXES = {
    "gbim": GBIM_IRI,
    "geo": "http://www.w3.org/2003/01/geo/wgs84_pos#",
    "rdfs": "http://www.w3.org/2000/01/rdf-schema#",
    "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
}


def prefixes(gbim_iri: str = GBIM_IRI) -> dict[str, str]:
    """The predefined prefixes, ``gbim:`` being the served namespace (``RAG_RDF_BASE_IRI`` + ``gbim/``)."""
    return {**PREFIXES, "gbim": gbim_iri}


# Starting a worker (imports) and building a version's graph are bounded by the data, not by the query.
LOAD_TIMEOUT_S = 60.0
GRAPHS_KEPT = 2
UNSUPPORTED = {
    "ServiceGraphPattern": "SERVICE is not supported: queries never reach other endpoints",
    "DatasetClause": "FROM and FROM NAMED are not supported: the facts are one default graph and nothing is loaded",
    "Graph": "GRAPH is not supported: the facts are one default graph, without named graphs",
}


class SparqlError(Exception):
    """A query that was not answered; the subclass says why."""


class SparqlRefused(SparqlError):
    """Not a valid or supported read-only query, or one that needs more than its limits allow."""

    def __init__(self, message: str, retire_worker: bool = False) -> None:
        super().__init__(message)
        self.retire_worker = retire_worker


class SparqlTimeout(SparqlError):
    """The query ran past the wall-clock limit; its worker was killed."""


class SparqlBusy(SparqlError):
    """Every worker is busy: the query was not queued."""


class SparqlUnavailable(SparqlError):
    """The facts graph could not be loaded, or the worker ended without an answer."""


class SparqlNotAcceptable(SparqlError):
    """The caller accepts no media type that this kind of query can be answered in."""


# The custom JSON of the JSON-body API: {"variables", "rows", "boolean", "truncated"}.
LEGACY_JSON = "legacy"
# rdflib's result serializers for SELECT and ASK; rdflib has no TSV writer (``tsv_results`` is this module's).
# CSV and TSV are SELECT-only formats (SPARQL 1.1 Query Results CSV and TSV Formats): ASK has neither.
TSV = "text/tab-separated-values"
RESULT_MEDIA_TYPES = {
    "application/sparql-results+json": "json",
    "application/sparql-results+xml": "xml",
    "text/csv": "csv",
    TSV: "tsv",
}


# The W3C's IRIs of the media types answered (https://www.w3.org/ns/formats/), for the service description.
FORMAT_IRIS = {
    "application/sparql-results+json": "SPARQL_Results_JSON",
    "application/sparql-results+xml": "SPARQL_Results_XML",
    "text/csv": "SPARQL_Results_CSV",
    TSV: "SPARQL_Results_TSV",
    "text/turtle": "Turtle",
    "application/n-triples": "N-Triples",
    "application/ld+json": "JSON-LD",
    "application/rdf+xml": "RDF_XML",
}
SD = "http://www.w3.org/ns/sparql-service-description#"


def service_description(endpoint: str, title: str = "Living Memory GBIM facts"):
    """The SPARQL 1.1 Service Description of the endpoint at ``endpoint`` (an rdflib graph): an ``sd:Service``
    answering SPARQL 1.1 Query (no update, no federation) over one default graph, in ``FORMAT_IRIS``."""
    from rdflib import DCTERMS, RDF, BNode, Graph, Literal, Namespace, URIRef

    sd = Namespace(SD)
    formats = Namespace("http://www.w3.org/ns/formats/")
    graph = Graph()
    graph.bind("sd", sd)
    graph.bind("formats", formats)
    graph.bind("dcterms", DCTERMS)
    service, dataset, default_graph = BNode(), BNode(), BNode()
    graph.add((service, RDF.type, sd.Service))
    graph.add((service, sd.endpoint, URIRef(endpoint)))
    graph.add((service, sd.supportedLanguage, sd.SPARQL11Query))
    graph.add((service, DCTERMS.title, Literal(title)))
    for name in FORMAT_IRIS.values():
        graph.add((service, sd.resultFormat, formats[name]))
    graph.add((service, sd.defaultEntailmentRegime, URIRef("http://www.w3.org/ns/entailment/Simple")))
    graph.add((service, sd.defaultDataset, dataset))
    graph.add((dataset, RDF.type, sd.Dataset))
    graph.add((dataset, sd.defaultGraph, default_graph))
    graph.add((default_graph, RDF.type, sd.Graph))
    return graph


@dataclass(frozen=True)
class ResultFormats:
    """The media type each kind of query is answered in (None: the caller accepts none for that kind)."""

    select: str | None = LEGACY_JSON
    ask: str | None = LEGACY_JSON
    graph: str | None = None  # CONSTRUCT and DESCRIBE: one of ``livemem.gbim.RDF_MEDIA_TYPES``


@dataclass(frozen=True)
class SparqlLimits:
    workers: int = 2
    timeout_s: float = 2.0
    memory_mb: int = 256
    max_result_chars: int = 1_000_000


# --- the serving side -------------------------------------------------------------------------------------------
Key = tuple[str, tuple[str, ...]]  # (version directory, access levels): one facts graph in a worker


class SparqlWarming(SparqlTimeout):
    """The time limit passed before the query could start: its worker was still loading the facts graph (a
    replacement for a worker that was killed). The worker is kept, loading, for the next query."""


class _Worker:
    """One worker process. ``loaded`` mirrors the graphs it holds (the same first-in, first-out rule over
    ``GRAPHS_KEPT`` as ``serve``); ``pending`` are the loads it was asked for whose replies are not read yet."""

    def __init__(self, limits: SparqlLimits, warm: Iterable[Key] = (), gbim_iri: str = GBIM_IRI) -> None:
        context = multiprocessing.get_context("spawn")  # never fork a process that holds threads and torch
        self.conn, child = context.Pipe()
        self.process = context.Process(
            target=serve,
            args=(child, limits.memory_mb, limits.max_result_chars, gbim_iri),
            name="sparql-worker",
            daemon=True,
        )
        self.process.start()
        child.close()
        self.loaded: list[Key] = []
        self.pending: list[Key] = []
        self.problem: str | None = None  # why the last load failed
        for key in warm:
            self._load(key)

    def _load(self, key: Key) -> None:
        self.conn.send(("load", *key))
        self.pending.append(key)

    def settle(self, deadline: float) -> bool:
        """Read the replies to the loads asked for, waiting until ``deadline`` (``time.monotonic``) at most;
        whether none is left."""
        try:
            while self.pending:
                if not self.conn.poll(max(0.0, deadline - time.monotonic())):
                    return False
                reply = self.conn.recv()
                key = self.pending.pop(0)
                if reply[0] == "loaded":
                    if key not in self.loaded:
                        if len(self.loaded) >= GRAPHS_KEPT:
                            self.loaded.pop(0)
                        self.loaded.append(key)
                else:
                    self.problem = reply[1]
        except (EOFError, OSError) as exc:
            self.process.join(1)
            raise SparqlUnavailable(
                f"the SPARQL worker ended without an answer (exit code {self.process.exitcode})"
            ) from exc
        return True

    def run(self, key: Key, request: tuple, timeout_s: float, started: float) -> dict[str, Any]:
        """The answer to ``request`` (query, limit, formats) over the graph ``key``. The limit counts from
        ``started`` (the query's arrival), so waiting for this worker to finish loading a graph the pool asked
        for (a replacement warming up) is part of it. A graph nobody asked for yet is built first, bounded by
        the data (``LOAD_TIMEOUT_S``), and the limit then starts."""
        deadline = started + timeout_s
        try:
            if not self.settle(deadline):
                raise SparqlWarming(
                    f"the query could not start within the {timeout_s:g} s limit: the SPARQL worker was still "
                    "loading the facts graph; retry in a moment"
                )
            if key not in self.loaded:
                self._load(key)
                if not self.settle(time.monotonic() + LOAD_TIMEOUT_S):
                    raise SparqlUnavailable(f"the facts graph was not loaded within {LOAD_TIMEOUT_S:g} s")
                if key not in self.loaded:
                    raise SparqlUnavailable(self.problem or "the facts graph could not be loaded")
                deadline = time.monotonic() + timeout_s
            self.conn.send(("query", *key, *request))
        except OSError as exc:  # it ended while idle (its CPU backstop, or killed from outside)
            raise SparqlUnavailable("the SPARQL worker had ended; retry") from exc
        if not self.conn.poll(max(0.0, deadline - time.monotonic())):
            raise SparqlTimeout(f"the query ran longer than {timeout_s:g} s and was stopped; narrow it down")
        try:
            reply = self.conn.recv()
        except (EOFError, OSError) as exc:
            self.process.join(1)
            raise SparqlUnavailable(
                f"the SPARQL worker ended without an answer (exit code {self.process.exitcode})"
            ) from exc
        if reply[0] == "refused":
            raise SparqlRefused(reply[1], retire_worker=reply[2])
        if reply[0] == "not_acceptable":
            raise SparqlNotAcceptable(reply[1])
        if reply[0] == "unavailable":
            raise SparqlUnavailable(reply[1])
        return reply[1]

    def stop(self) -> None:
        """SIGKILL now: whatever it computes ends at once."""
        self.process.kill()

    def reap(self) -> None:
        self.process.join(5)
        self.conn.close()

    def kill(self) -> None:
        self.stop()
        self.reap()


class SparqlPool:
    """At most ``limits.workers`` queries at once, each in its own worker process; more are refused, not queued.

    A worker that overran (or died, or ran out of memory) is killed without waiting for it to be reaped, and its
    replacement starts loading the graphs most recently asked for in the background, so the next query finds it
    ready or nearly so; the time limit counts from a query's arrival (``_Worker.run``). ``gbim_iri``: the
    namespace of the graphs' nodes and of the ``gbim:`` prefix (``RAG_RDF_BASE_IRI`` + ``gbim/``)."""

    def __init__(self, limits: SparqlLimits, gbim_iri: str = GBIM_IRI) -> None:
        self.limits = limits
        self.gbim_iri = gbim_iri
        self._slots = threading.BoundedSemaphore(limits.workers)
        self._idle: list[_Worker] = []
        self._recent: list[Key] = []  # the graphs last asked for, most recent last
        self._lock = threading.Lock()
        self._closed = False

    def run(
        self, version_dir: str, access: Iterable[str], query: str, limit: int, formats: ResultFormats = ResultFormats()
    ) -> dict[str, Any]:
        """The answer to ``query`` over the facts ``access`` may read, at most ``limit`` rows (or triples).

        In ``LEGACY_JSON``: ``{"variables", "rows", "boolean", "truncated"}``; in a media type of ``formats``:
        ``{"media_type", "body", "truncated"}`` (``body`` is the serialized result)."""
        started = time.monotonic()
        if not self._slots.acquire(blocking=False):
            raise SparqlBusy(f"{self.limits.workers} SPARQL queries are already running; retry in a moment")
        try:
            key: Key = (version_dir, tuple(sorted(access)))
            with self._lock:
                self._recent = [*[k for k in self._recent if k != key][1 - GRAPHS_KEPT :], key]
            worker = self._checkout()
            try:
                result = worker.run(key, (query, limit, formats), self.limits.timeout_s, started)
            except (SparqlNotAcceptable, SparqlWarming):  # nothing runs in it: a warming worker goes on loading
                self._checkin(worker)
                raise
            except SparqlRefused as exc:
                if exc.retire_worker:  # ran out of memory: a fresh process is the clean state
                    self._retire(worker)
                else:
                    self._checkin(worker)
                raise
            except BaseException:
                # Overran, died, or this thread was interrupted: the worker may still be computing, so it goes.
                self._retire(worker)
                raise
            self._checkin(worker)
            return result
        finally:
            self._slots.release()

    def _checkout(self) -> _Worker:
        """An idle worker, one whose loads are done first; a new one when none is idle."""
        with self._lock:
            alive = []
            for worker in self._idle:
                if worker.process.is_alive():
                    alive.append(worker)
                else:
                    threading.Thread(target=worker.reap, daemon=True).start()
            self._idle = alive
            for worker in reversed(alive):
                try:
                    ready = worker.settle(time.monotonic())
                except SparqlUnavailable:
                    ready = True  # it died: its query will say so (and it is replaced)
                if ready:
                    alive.remove(worker)
                    return worker
            if alive:
                return alive.pop()
        return _Worker(self.limits, gbim_iri=self.gbim_iri)

    def _checkin(self, worker: _Worker) -> None:
        with self._lock:
            if not self._closed and worker.process.is_alive() and len(self._idle) < self.limits.workers:
                self._idle.append(worker)
                return
        worker.kill()

    def _retire(self, worker: _Worker) -> None:
        """Kill ``worker`` now and reap it in the background; start its replacement now (a spawn takes
        milliseconds), which imports rdflib and loads the graphs last asked for in its own process while the
        caller's answer (408, 400, 503) goes out. Registered at once, so the next query finds it, ready or loading
        (then it waits at most until its limit), rather than starting a cold worker of its own."""
        worker.stop()
        threading.Thread(target=worker.reap, name="sparql-reap", daemon=True).start()
        self._replace()

    def _replace(self) -> None:
        with self._lock:
            if self._closed or len(self._idle) >= self.limits.workers:
                return
            try:
                self._idle.append(_Worker(self.limits, warm=self._recent, gbim_iri=self.gbim_iri))
            except OSError:
                log.exception("SPARQL: a replacement worker could not be started")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()


# --- the worker side --------------------------------------------------------------------------------------------
def serve(conn: Any, memory_mb: int, max_result_chars: int, gbim_iri: str = GBIM_IRI) -> None:
    """The worker's loop: one request at a time until the serving process closes the pipe."""
    _forbid_network()
    import rdflib.plugins.sparql

    rdflib.plugins.sparql.SPARQL_LOAD_GRAPHS = False  # GRAPH <iri> would otherwise fetch <iri> from the web
    graphs: dict[tuple[str, tuple[str, ...]], Any] = {}

    def load(version_dir: str, access: list[str] | tuple[str, ...]) -> tuple | None:
        """None once the graph is held; else the ``("unavailable", why)`` reply."""
        key = (version_dir, tuple(access))
        try:
            if key not in graphs:
                while len(graphs) >= GRAPHS_KEPT:
                    graphs.pop(next(iter(graphs)))
                graphs[key] = facts_graph(version_dir, frozenset(access), gbim_iri)
        except Exception as exc:  # a damaged or missing GBIM export: the serving side answers 503
            # The details (with server paths) go to the log only, never to the caller.
            log.exception("SPARQL worker: the facts graph of %s could not be loaded", version_dir)
            return ("unavailable", f"the facts graph of this version could not be loaded ({type(exc).__name__})")
        return None

    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] == "load":  # ("load", version_dir, access): build the graph ahead of its queries
            conn.send(load(message[1], message[2]) or ("loaded",))
            continue
        _, version_dir, access, query, limit, formats = message  # ("query", version_dir, access, query, ...)
        failed = load(version_dir, access)
        if failed is not None:
            conn.send(failed)
            continue
        graph = graphs[(version_dir, tuple(access))]
        conn.send(answer(graph, query, limit, memory_mb, max_result_chars, formats, gbim_iri))


def facts_graph(version_dir: str, access: frozenset[str], gbim_iri: str = GBIM_IRI):
    """The rdflib graph of the entities ``access`` may read and of their relations."""
    from livemem.gbim import rdf_graph
    from livemem.query.gis_index import cached_gis_index

    index = cached_gis_index(version_dir)
    if index is None:
        raise FileNotFoundError("this version holds no GBIM export")
    entities = [e for e in index.entities if e["access"] in access]
    ids = {e["entity_id"] for e in entities}
    relations = [r for e in entities for r in index.relations.get(e["entity_id"], ()) if r["subject"] in ids]
    return rdf_graph(entities, relations, gbim_iri=gbim_iri)


def answer(
    graph: Any,
    query: str,
    limit: int,
    memory_mb: int,
    max_result_chars: int,
    formats: ResultFormats = ResultFormats(),
    gbim_iri: str = GBIM_IRI,
) -> tuple:
    """``("ok", result)``, ``("refused", message, retire)`` or ``("not_acceptable", message)``."""
    try:
        with _memory_budget(memory_mb):
            prepared = prepare(query, gbim_iri)
            kind = prepared.algebra.name.removesuffix("Query").upper()
            media_type = {"SELECT": formats.select, "ASK": formats.ask}.get(kind, formats.graph)
            if media_type is None:
                return (
                    "not_acceptable",
                    f"{kind} results cannot be given in any format this request accepts",
                )
            if kind in ("SELECT", "ASK"):
                return ("ok", _evaluate(graph, prepared, limit, max_result_chars, media_type))
            return ("ok", _evaluate_graph(graph, prepared, limit, max_result_chars, media_type, gbim_iri))
    except SparqlRefused as exc:
        return ("refused", str(exc), False)
    except MemoryError:
        return ("refused", f"the query needs more than the {memory_mb} MB it may use; narrow it down", True)
    except RecursionError:
        return ("refused", "the query is nested too deeply", False)
    except Exception as exc:  # rdflib's evaluation errors (unknown function, type errors, ...) are the query's
        return ("refused", f"the query failed: {type(exc).__name__}: {str(exc)[:500]}", False)


def prepare(query: str, gbim_iri: str = GBIM_IRI):
    """The parsed query, if it is a SELECT, ASK, CONSTRUCT or DESCRIBE that uses only what this endpoint supports."""
    from rdflib.plugins.sparql import prepareQuery
    from rdflib.plugins.sparql.parser import parseUpdate

    try:
        prepared = prepareQuery(query, initNs=prefixes(gbim_iri))
    except Exception as exc:  # pyparsing and rdflib raise several kinds for a bad query
        try:
            parseUpdate(query)
        except Exception:
            raise SparqlRefused(f"not a valid SPARQL query: {str(exc)[:500]}") from exc
        raise SparqlRefused(
            "SPARQL Update (INSERT, DELETE, LOAD, CLEAR, ...) is not allowed: this endpoint is read-only"
        ) from exc
    kind = prepared.algebra.name
    if kind not in ("SelectQuery", "AskQuery", "ConstructQuery", "DescribeQuery"):
        raise SparqlRefused(
            f"only SELECT, ASK, CONSTRUCT and DESCRIBE queries are allowed here, not {kind.removesuffix('Query').upper()}"
        )
    found = _algebra_names(prepared.algebra)
    problems = [message for name, message in UNSUPPORTED.items() if name in found]
    if problems:
        raise SparqlRefused("; ".join(problems))
    return prepared


def _algebra_names(root: Any) -> set[str]:
    from rdflib.plugins.sparql.parserutils import CompValue

    names: set[str] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, CompValue):
            names.add(node.name)
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
    return names


def _evaluate(graph: Any, prepared: Any, limit: int, max_result_chars: int, media_type: str) -> dict[str, Any]:
    result = graph.query(prepared)
    if result.type == "ASK":
        if media_type == LEGACY_JSON:
            return {"variables": [], "rows": [], "boolean": bool(result.askAnswer), "truncated": False}
        return _serialized(result, media_type, truncated=False)
    rows: list[Any] = []
    chars = 0
    truncated = False
    for row in result:  # lazy: breaking out ends the evaluation
        chars += sum(len(term) for term in row if term is not None)
        if len(rows) == limit or chars > max_result_chars:
            truncated = True
            break
        rows.append(row)
    if media_type == LEGACY_JSON:
        variables = [str(v) for v in result.vars]
        values = [
            {v: (None if term is None else str(term)) for v, term in zip(variables, row, strict=True)} for row in rows
        ]
        return {"variables": variables, "rows": values, "boolean": None, "truncated": truncated}
    from rdflib.query import Result

    kept = Result("SELECT")
    kept.vars = result.vars
    kept.bindings = [{v: term for v, term in zip(result.vars, row, strict=True) if term is not None} for row in rows]
    return _serialized(kept, media_type, truncated)


def _serialized(result: Any, media_type: str, truncated: bool) -> dict[str, Any]:
    if media_type == TSV:
        body = tsv_results(result)
    else:
        body = result.serialize(format=RESULT_MEDIA_TYPES[media_type]).decode("utf-8")
    return {"media_type": media_type, "body": body, "truncated": truncated}


# SPARQL 1.1 Query Results TSV: a string's tab, newline and carriage return must be escaped (one row per line).
_TSV_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"})


def tsv_results(result: Any) -> str:
    """A SELECT result in the SPARQL 1.1 TSV results format: a header of ``?variables``, then one line per row
    of RDF terms in SPARQL syntax (``<iri>``, ``"literal"`` with ``@lang`` or ``^^<datatype>``, ``_:blank``),
    an unbound value empty. Unlike CSV, no value loses its kind or datatype."""
    lines = ["\t".join(f"?{var}" for var in result.vars)]
    for binding in result.bindings:
        lines.append("\t".join(_tsv_term(binding.get(var)) for var in result.vars))
    return "\n".join(lines) + "\n"


def _tsv_term(term: Any) -> str:
    from rdflib import XSD, BNode, Literal

    if term is None:
        return ""
    if isinstance(term, Literal):
        text = f'"{str(term).translate(_TSV_ESCAPES)}"'
        if term.language:
            return f"{text}@{term.language}"
        if term.datatype is not None and term.datatype != XSD.string:
            return f"{text}^^<{term.datatype}>"
        return text
    if isinstance(term, BNode):
        return f"_:{term}"
    return f"<{term}>"  # an IRI: no tab, newline or '>' can be in one


def _evaluate_graph(
    graph: Any, prepared: Any, limit: int, max_result_chars: int, media_type: str, gbim_iri: str = GBIM_IRI
) -> dict[str, Any]:
    """A CONSTRUCT or DESCRIBE answer: at most ``limit`` triples, in an RDF media type."""
    from rdflib import Graph

    from livemem.gbim import serialize_rdf

    kept = Graph()
    for prefix, iri in prefixes(gbim_iri).items():
        kept.bind(prefix, iri, replace=True)
    chars = 0
    truncated = False
    for triple in graph.query(prepared).graph:
        chars += sum(len(term) for term in triple)
        if len(kept) == limit or chars > max_result_chars:
            truncated = True
            break
        kept.add(triple)
    return {"media_type": media_type, "body": serialize_rdf(kept, media_type), "truncated": truncated}


@contextmanager
def _memory_budget(memory_mb: int):
    """Let the process's address space grow by at most ``memory_mb`` while the query runs (Linux)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    try:
        with open("/proc/self/statm") as statm:
            in_use = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: the time limit still ends the query
        in_use = None
    if in_use is not None:
        budget = in_use + memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (budget if hard == resource.RLIM_INFINITY else min(budget, hard), hard))
    cpu_soft, cpu_hard = resource.getrlimit(resource.RLIMIT_CPU)
    used = resource.getrusage(resource.RUSAGE_SELF)
    # A backstop only: the serving process kills the worker long before; this ends one it no longer watches.
    cpu_budget = int(used.ru_utime + used.ru_stime) + 60
    if cpu_hard == resource.RLIM_INFINITY or cpu_budget <= cpu_hard:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_budget, cpu_hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_soft, cpu_hard))


def _forbid_network() -> None:
    """No query may reach the network from a worker, whatever rdflib would do (its pipe is already open)."""
    import socket

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise PermissionError("the SPARQL worker has no network access")

    for name in ("connect", "connect_ex", "sendto", "sendmsg"):
        setattr(socket.socket, name, refuse)
    socket.create_connection = refuse  # type: ignore[assignment]
    socket.getaddrinfo = refuse  # type: ignore[assignment]
