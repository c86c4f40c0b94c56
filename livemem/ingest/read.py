"""Reading and chunking a build's changed files: git blobs → text → chunks → rows, in batches, in worker
processes when there are many (``read_and_chunk``; forkserver workers, ``LIVEMEM_BUILD_WORKERS``, a watchdog that
ends them with the build). ``livemem.ingest.plan`` plans what to read, ``livemem.ingest.rechunk`` asks for it.

One file never stops a build: whatever extracting or chunking it raises becomes its ``skipped_files`` row with a
report (path, reason, extractor, error; ``BuildResult.sources[...].skip_reports``, the manifest's
``changes.per_source``), and the documents past the build's extraction budget (``ExtractionBudget``,
``LIVEMEM_DOCUMENT_BUDGET_S``) are reported ``deferred`` and extracted by the next build. Only a blob git cannot
hand over (a damaged repository, not a file) or a dead worker process stops it."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from livemem.dates import document_date
from livemem.errors import LivingMemoryError, SourceError
from livemem.index import records
from livemem.index.postings import Postings, TermIds
from livemem.ingest.chunking import Chunk, chunk_files, file_type
from livemem.ingest.documents import (
    DOCUMENT_MAX_BYTES,
    LIBRARIES,
    DocumentError,
    Extracted,
    document_format,
    extract_isolated,
    extractor_id,
)
from livemem.model.embedding import cache_key
from livemem.settings import BuildSettings
from livemem.sources.config import SourceConfig
from livemem.sources.gitsource import FileHistory, GitSource, TreeEntry

if TYPE_CHECKING:
    from multiprocessing.sharedctypes import Synchronized

log = logging.getLogger(__name__)

CHUNK_BATCH_FILES = 512  # files chunked together (one tokenizer call for their new words)
# Files to read and chunk from which worker processes do it (``read_and_chunk``): starting them costs about a second,
# and small builds (every one-file change, every test) stay in this process.
POOL_MIN_FILES = 4000
WORKERS_ENV = "LIVEMEM_BUILD_WORKERS"
READ_AHEAD = 4  # batches in flight per worker process


def chunk_many(files: list[tuple[str, str]], max_chars: int, max_tokens: int | None) -> list[list[Chunk]]:
    """Chunks of each ``(path, text)``, as ``chunk_files`` gives them, in batches: the words no earlier file had
    are counted by the tokenizer in one threaded call per batch."""
    return [
        chunks
        for start in range(0, len(files), CHUNK_BATCH_FILES)
        for chunks in chunk_files(files[start : start + CHUNK_BATCH_FILES], max_chars, max_tokens)
    ]


@dataclass(frozen=True)
class ReadJob:
    """What turning one source's files into rows needs (sent to worker processes with each batch)."""

    source: SourceConfig
    repo: str
    model_id: str
    max_file_bytes: int
    max_chunk_chars: int
    chunk_tokens: int | None
    # worker processes and document limits, as the entry point read them (default: the section's defaults)
    settings: BuildSettings = field(default_factory=BuildSettings.defaults)


@dataclass(frozen=True)
class FileTask:
    """One rebuilt file: its tree entry, its provenance and the ``created_at`` the base kept for it (else None)."""

    path: str
    entry: TreeEntry
    history: FileHistory
    created: str | None


@dataclass
class BatchRows:
    rows: list[dict[str, Any]]
    parents: list[dict[str, Any]]
    skipped: list[dict[str, Any]]
    truncated: list[tuple[str, int]]  # (path, bytes) of files indexed up to max_file_bytes
    terms: TermIds | None = None  # the BM25 tokens of the rows' embedded texts (``Postings.tokenize``)


class ExtractionBudget:
    """The seconds of document extraction one build may spend (``LIVEMEM_DOCUMENT_BUDGET_S``; 0: no limit), summed
    over its worker processes (``share``: a counter in shared memory, handed to them when they start). A document is
    extracted only while some of the budget is left, and one started then has its whole ``LIVEMEM_DOCUMENT_TIMEOUT``;
    the others are reported ``deferred``, and the next build extracts them (``livemem.ingest.plan`` never carries a
    deferred file)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._spent = 0.0
        self._shared: Synchronized[float] | None = None  # multiprocessing.Value once shared with worker processes

    def share(self) -> ExtractionBudget:
        """This budget, counted in shared memory from now on (pass it to worker processes as they start)."""
        if self._shared is None:
            self._shared = multiprocessing.get_context("forkserver").Value("d", self._spent)
        return self

    def left(self) -> bool:
        return self.seconds <= 0 or self.spent < self.seconds

    def charge(self, seconds: float) -> None:
        if self._shared is None:
            self._spent += seconds
            return
        with self._shared.get_lock():
            self._shared.value += seconds

    @property
    def spent(self) -> float:
        return self._spent if self._shared is None else self._shared.value


def read_and_chunk(
    job: ReadJob, tasks: list[FileTask], git: GitSource, budget: ExtractionBudget | None = None
) -> Iterator[BatchRows]:
    """The rows of ``tasks`` in batches of ``CHUNK_BATCH_FILES`` files, in order. With ``POOL_MIN_FILES`` files or
    more, worker processes (``LIVEMEM_BUILD_WORKERS``, default one per core) read and chunk the batches while this
    process collects them in order; the rows are the same either way (each batch is a pure function of its files).

    The workers are started by the ``forkserver`` method: forking this process (which holds DuckDB's, the
    tokenizer's and Dagster's threads) could deadlock a worker on a lock another thread held. Like any
    ``multiprocessing`` start method but ``fork``, it imports the main script in each worker, so a script that
    builds a large corpus needs the usual ``if __name__ == "__main__":`` guard (console scripts, ``python -m``
    and Dagster have one); ``LIVEMEM_BUILD_WORKERS=1`` builds in this process. ``budget``: the build's extraction
    budget (None: one of ``job.settings.document_budget_s`` for these tasks alone)."""
    budget = budget or ExtractionBudget(job.settings.document_budget_s)
    batches = [tasks[i : i + CHUNK_BATCH_FILES] for i in range(0, len(tasks), CHUNK_BATCH_FILES)]
    workers = min(build_workers(job.settings), len(batches))
    if len(tasks) < POOL_MIN_FILES or workers < 2:
        for batch in batches:
            yield _batch_rows(job, batch, git, budget)
        return
    yield from _in_workers(_worker_batch, job, batches, workers, budget)


def build_workers(settings: BuildSettings) -> int:
    """Worker processes a large build reads and chunks with: ``LIVEMEM_BUILD_WORKERS``, else one per core."""
    workers = settings.workers
    return (os.cpu_count() or 1) if workers is None else max(1, workers)


def _in_workers(
    function, job: ReadJob, batches: list[list[FileTask]], workers: int, budget: ExtractionBudget | None = None
) -> Iterator[BatchRows]:
    """``function(job, batch)`` of every batch in worker processes, yielded in order; ``budget`` is shared with them.
    A worker that raises or dies stops the build with an error naming the files; no version is published (a segment
    flushed before is held by none, and ``gc`` removes it)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])  # workers fork from a server that imported this module once
    budget = (budget or ExtractionBudget(job.settings.document_budget_s)).share()
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_watch_build, initargs=(os.getpid(), budget))
    try:
        # a window of batches in flight, not all of them: while the build writes a segment (``livemem.ingest.flush``)
        # the workers get this far ahead, and their finished rows wait in memory
        futures: deque = deque(pool.submit(function, job, batch) for batch in batches[: workers * READ_AHEAD])
        for i in range(len(batches)):
            try:
                rows = futures.popleft().result()
                if i + len(futures) + 1 < len(batches):
                    futures.append(pool.submit(function, job, batches[i + len(futures) + 1]))
            except BrokenProcessPool as exc:
                # which batch the dead worker held is unknown: name the files of every batch left unfinished
                left = [t.path for batch in batches[i:] for t in batch]
                named = ", ".join(left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
                raise LivingMemoryError(
                    f"source {job.source.name!r}: a worker process died while reading and chunking files ({named}): "
                    f"killed, out of memory, or a main script without an `if __name__ == '__main__':` guard ran "
                    f"again in it; {WORKERS_ENV}=1 builds in one process"
                ) from exc
            yield rows
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _watch_build(build_pid: int, budget: ExtractionBudget | None = None) -> None:
    """A worker's initializer: keep the build's extraction budget, and start a watchdog that exits when the build
    process is gone. A build killed before it could stop its pool (SIGKILL, a run terminated) leaves workers that
    would otherwise wait forever to hand back their batch."""
    global _WORKER_BUDGET
    _WORKER_BUDGET = budget

    def watch() -> None:
        while True:
            time.sleep(1.0)
            try:
                os.kill(build_pid, 0)
            except OSError:  # no such process (or the id now names another user's): the build is gone
                os._exit(1)

    threading.Thread(target=watch, name="livemem-build-watchdog", daemon=True).start()


_WORKER_REPOS: dict[str, GitSource] = {}  # a worker process's open repositories (one `git cat-file` each)
_WORKER_BUDGET: ExtractionBudget | None = None  # the build's extraction budget, in a worker process


def _worker_batch(job: ReadJob, batch: list[FileTask]) -> BatchRows:
    git = _WORKER_REPOS.get(job.repo)
    if git is None:
        git = _WORKER_REPOS[job.repo] = GitSource(Path(job.repo), job.source.name)
    return _batch_rows(job, batch, git, _WORKER_BUDGET)


def _extract(job: ReadJob, task: FileTask, raw: bytes, budget: ExtractionBudget | None) -> Extracted | dict:
    """A document's extraction, or its report (``reason``, ``extractor``, ``error``) when it gives no text: any
    exception is the file's, and past the build's extraction budget it is ``deferred`` without being read."""
    fmt = document_format(task.path) or ""
    extractor = extractor_id(fmt)
    if budget is not None and not budget.left():
        detail = f"the build's extraction budget ({budget.seconds:g} s) is spent: the next build extracts it"
        return {"reason": "deferred", "extractor": extractor, "error": detail}
    started = time.perf_counter()
    try:
        return extract_isolated(task.path, raw, job.settings)
    except DocumentError as exc:
        return {"reason": exc.reason, "extractor": extractor, "error": exc.detail or str(exc)}
    except Exception as exc:  # extract_isolated turns a document's errors into DocumentError; this is a last guard
        return {"reason": "extraction_failed", "extractor": extractor, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        if budget is not None:
            budget.charge(time.perf_counter() - started)


def _batch_rows(
    job: ReadJob, batch: list[FileTask], git: GitSource, budget: ExtractionBudget | None = None
) -> BatchRows:
    """Read, decode and chunk a batch of files. A file that cannot be extracted, chunked or turned into rows is
    reported skipped with its error (``skip_row``); a blob git cannot hand over raises an error naming it. Only the
    first ``max_file_bytes`` of a blob are read (``GitSource.read_prefix``), whatever its size; ``budget``: the
    build's extraction budget (None: none)."""
    out = BatchRows([], [], [], [])
    readable, extracted = _read_batch(job, batch, git, budget, out)
    files = [(task.path, text) for task, text, _, _ in readable]
    chunked = _chunk_batch(job, files)
    for (task, text, truncated, size), chunks in zip(readable, chunked, strict=True):
        if _add_file_rows(job, task, text, truncated, chunks, extracted.get(task.path), out) and truncated:
            out.truncated.append((task.path, size))
    out.terms = Postings.tokenize([row["_embed_text"] for row in out.rows])
    return out


def _read_batch(
    job: ReadJob, batch: list[FileTask], git: GitSource, budget: ExtractionBudget | None, out: BatchRows
) -> tuple[list[tuple[FileTask, str, bool, int]], dict[str, Extracted]]:
    """The files of a batch that give text (task, text, truncated, the blob's size) and the documents' extractions
    (path -> extraction); the others are reported in ``out.skipped``."""
    src = job.source
    readable: list[tuple[FileTask, str, bool, int]] = []  # task, text, truncated, the blob's size
    extracted: dict[str, Extracted] = {}  # path -> a document's extraction
    for task in batch:
        entry = task.entry
        document = document_format(task.path) is not None
        try:
            # a document is parsed whole (up to DOCUMENT_MAX_BYTES); its extracted text is capped at max_file_bytes
            raw, size = git.read_prefix(entry.blob_sha, DOCUMENT_MAX_BYTES + 1 if document else job.max_file_bytes)
        except Exception as exc:
            raise SourceError(
                f"source {src.name!r}: {task.path} (blob {entry.blob_sha}) cannot be read: {exc}"
            ) from exc
        reason, report = None, {}
        truncated = size > job.max_file_bytes
        if is_lfs_pointer(raw, size):
            reason = "lfs_pointer"
        elif document:
            doc = _extract(job, task, raw, budget)
            if isinstance(doc, dict):
                reason, report = doc["reason"], doc
                log.warning("source %s: %s skipped (%s: %s; %s)", src.name, task.path, reason, doc["error"],
                            doc["extractor"])  # fmt: skip
            else:
                text, truncated = _cap_text(doc.text, job.max_file_bytes)
                extracted[task.path] = doc
        elif b"\0" in raw[:8192]:
            reason = "binary"
        else:
            try:
                text = raw.decode("utf-8", errors="strict" if not truncated else "ignore")
            except UnicodeDecodeError:
                reason = "non_utf8"
            else:
                if not text.strip():
                    reason = "empty"
        if reason:
            out.skipped.append(
                skip_row(src.name, task.path, entry, reason, report.get("extractor"), report.get("error"))
            )
            continue
        readable.append((task, text, truncated, size))
    return readable, extracted


def _chunk_batch(job: ReadJob, files: list[tuple[str, str]]) -> list[list[Chunk] | Exception]:
    """The chunks of each ``(path, text)``, together; when that fails, file by file, so the file that fails is
    reported (its exception in its place) and the others are chunked."""
    try:
        chunked: list[list[Chunk] | Exception] = list(chunk_many(files, job.max_chunk_chars, job.chunk_tokens))
    except Exception:
        chunked = []
        for path, text in files:  # one by one: the file that fails is reported, the others are chunked
            try:
                chunked.append(chunk_files([(path, text)], job.max_chunk_chars, job.chunk_tokens)[0])
            except Exception as exc:
                chunked.append(exc)
    return chunked


def _add_file_rows(
    job: ReadJob,
    task: FileTask,
    text: str,
    truncated: bool,
    chunks: list[Chunk] | Exception,
    doc: Extracted | None,
    out: BatchRows,
) -> bool:
    """One file's rows (``_file_rows``) into ``out``; a file whose chunking or rows fail is dropped and reported
    skipped (``chunking_failed``), and the batch goes on. Whether its rows were added."""
    src = job.source
    rows, parents = len(out.rows), len(out.parents)
    try:
        if isinstance(chunks, Exception):
            raise chunks
        _file_rows(job, task, text, truncated, chunks, out, doc)
    except Exception as exc:  # this file's rows are dropped, it is reported, the batch goes on
        del out.rows[rows:], out.parents[parents:]
        error = f"{type(exc).__name__}: {exc}"
        log.warning("source %s: %s skipped (chunking_failed: %s)", src.name, task.path, error)
        out.skipped.append(
            skip_row(src.name, task.path, task.entry, "chunking_failed", doc.extractor if doc else None, error)
        )
        return False
    return True


def skip_row(
    source: str, path: str, entry: TreeEntry, reason: str, extractor: str | None = None, error: str | None = None
) -> dict[str, Any]:
    """A ``skipped_files`` row: a file of the source that is reported, not indexed; ``extractor`` and ``error``
    (when given) are its report's, kept in the build's result and manifest, not in the table."""
    row = {"source": source, "path": path, "blob_sha": entry.blob_sha, "size": entry.size, "reason": reason}
    if error is not None:
        row.update(extractor=extractor, error=error[:500])
    return row


# A Git LFS pointer (https://github.com/git-lfs/git-lfs/blob/main/docs/spec.md): the text git holds in place of a
# file kept in LFS storage, under 1024 bytes; indexing it would index an object id, never the file.
LFS_POINTER_MAX_BYTES = 1024
_LFS_VERSION = re.compile(rb"version https://(git-lfs\.github\.com|hawser\.github\.com)/spec/v1\r?\n")
_LFS_OID = re.compile(rb"^oid sha256:[0-9a-f]{64}\r?$", re.MULTILINE)
_LFS_SIZE = re.compile(rb"^size [0-9]+\r?$", re.MULTILINE)


def is_lfs_pointer(raw: bytes, size: int) -> bool:
    """Whether a blob (``raw``: its bytes, ``size``: its whole size) is a Git LFS pointer file."""
    return (
        size < LFS_POINTER_MAX_BYTES
        and _LFS_VERSION.match(raw) is not None
        and _LFS_OID.search(raw) is not None
        and _LFS_SIZE.search(raw) is not None
    )


def _cap_text(text: str, max_bytes: int) -> tuple[str, bool]:
    """A document's extracted text up to ``max_bytes`` UTF-8 bytes (cut at a character), and whether it was cut."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text, False
    return data[:max_bytes].decode("utf-8", errors="ignore"), True


def _chunk_pages(text: str, chunks: list[Chunk], doc: Extracted) -> list[dict[str, Any]]:
    """What each chunk of a document adds to its metadata: its format and extractor and, for a PDF, the page it
    starts on (``page``) and the one it ends on (``page_end``, only when another). Chunks are substrings of the text
    in order, so each is found after the previous one's start."""
    fmt = document_format_of(doc)
    out: list[dict[str, Any]] = []
    cursor = 0
    for chunk in chunks:
        start = text.find(chunk.content, cursor)
        if start < 0:
            raise LivingMemoryError(f"chunk {len(out)} is not a substring of the extracted text")
        cursor = start + 1
        extra: dict[str, Any] = {"format": fmt, "extractor": doc.extractor}
        first = doc.page_of(start)
        if first is not None:
            last = doc.page_of(start + len(chunk.content) - 1)
            extra["page"] = first
            if last != first:
                extra["page_end"] = last
        out.append(extra)
    return out


def document_format_of(doc: Extracted) -> str:
    """The format an extractor reads (``pdf`` for ``pypdfium2 …``)."""
    library = doc.extractor.split(" ", 1)[0]
    return next(fmt for fmt, lib in LIBRARIES.items() if lib == library)


def _file_rows(
    job: ReadJob,
    task: FileTask,
    text: str,
    truncated: bool,
    chunks: list[Chunk],
    out: BatchRows,
    doc: Extracted | None = None,
) -> None:
    src, path, prov = job.source, task.path, task.history
    sealed = records.is_sealed(text, src.is_sealed_path(path))
    pid = records.parent_id(src.name, path)
    kind = file_type(path)
    domain = {**(document_date(path, text) or {}), **src.domain_metadata(path)}  # configured values win
    domain_json = json.dumps(domain, sort_keys=True, ensure_ascii=False) if domain else None
    pages = _chunk_pages(text, chunks, doc) if doc is not None else None
    created = task.created or prov.first_time
    seal_state = "SEALED" if sealed else "OPEN"
    occurrences: Counter = Counter()
    for index, chunk in enumerate(chunks):
        if pages is not None:  # a document's chunk: its format, extractor and page with the file's domain values
            domain_json = json.dumps({**pages[index], **domain}, sort_keys=True, ensure_ascii=False)
        sha = records.content_hash(chunk.content)
        occurrence = occurrences[sha]
        occurrences[sha] += 1
        embed_text = records.embed_text(chunk.content, chunk.heading_path)
        out.rows.append(
            {
                "chunk_id": records.chunk_id(src.name, path, sha, occurrence), "source": src.name,
                "collection": src.collection, "access": src.access, "content": chunk.content, "content_hash": sha,
                "embed_hash": cache_key(job.model_id, embed_text), "seal_state": seal_state, "path": path,
                "commit_sha": prov.last_commit, "timestamp": prov.last_time, "type": kind,
                "size": len(chunk.content.encode("utf-8")), "created_at": created, "updated_at": prov.last_time,
                "heading_path": json.dumps(chunk.heading_path, ensure_ascii=False), "chunk_index": index,
                "parent_id": pid, "domain": domain_json, "_embed_text": embed_text,
            }
        )  # fmt: skip
    out.parents.append(
        {
            "parent_id": pid, "source": src.name, "collection": src.collection, "access": src.access, "path": path,
            "blob_sha": task.entry.blob_sha, "commit_sha": prov.last_commit, "timestamp": prov.last_time,
            "created_at": created, "updated_at": prov.last_time, "seal_state": seal_state, "type": kind,
            "size": task.entry.size, "truncated": truncated, "chunk_count": len(chunks), "content": text,
        }
    )  # fmt: skip
